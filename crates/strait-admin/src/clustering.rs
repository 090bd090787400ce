//! Hybrid mode in the Admin API: a control plane's `/clustering/*` views of
//! its data planes (Kong's shapes), a data plane's refusal of configuration
//! writes, and its link to the control plane in `/status`.

use http::StatusCode;
use serde_json::{json, Map, Value};
use strait_cluster::cp::DataPlane;
use strait_cluster::dp::DataPlaneStatus;

use crate::response::{json_response, message, AdminResponse};
use crate::{AdminState, Cluster};

const NOT_A_CONTROL_PLANE: &str =
    "this endpoint is only available when Kong is configured to run as Control Plane for the cluster";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn plane_json(plane: &DataPlane, purge_delay: i64) -> Value {
    json!({
        "id": plane.id,
        "hostname": plane.hostname,
        "ip": plane.ip,
        "version": plane.version,
        "sync_status": plane.sync_status,
        "config_hash": plane.config_hash,
        "last_seen": plane.last_seen,
        "ttl": (plane.last_seen + purge_delay - now()).max(0),
        "labels": {},
        // Strait's additions: whether the session is up, the version
        // acknowledged, and the bytes sent over it.
        "connected": plane.connected,
        "config_version": plane.config_version,
        "bytes_sent": plane.bytes_sent,
    })
}

/// `GET /clustering/data-planes`.
pub fn data_planes(state: &AdminState) -> AdminResponse {
    let Cluster::ControlPlane(planes) = &state.cluster else {
        return message(StatusCode::BAD_REQUEST, NOT_A_CONTROL_PLANE);
    };
    let delay = planes.purge_delay().as_secs() as i64;
    let data: Vec<Value> = planes.list().iter().map(|p| plane_json(p, delay)).collect();
    json_response(StatusCode::OK, &json!({ "data": data, "next": null }))
}

/// `GET /clustering/status`: every data plane by id (Kong's deprecated view).
pub fn status(state: &AdminState) -> AdminResponse {
    let Cluster::ControlPlane(planes) = &state.cluster else {
        return message(StatusCode::BAD_REQUEST, NOT_A_CONTROL_PLANE);
    };
    let mut out = Map::new();
    for plane in planes.list() {
        out.insert(
            plane.id.clone(),
            json!({
                "config_hash": plane.config_hash,
                "hostname": plane.hostname,
                "ip": plane.ip,
                "last_seen": plane.last_seen,
            }),
        );
    }
    json_response(StatusCode::OK, &Value::Object(out))
}

/// A configuration write on a data plane.
pub fn read_only(link: &DataPlaneStatus) -> AdminResponse {
    message(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!(
            "this node is a data plane (role = data_plane): its configuration comes from the control plane at {}; \
             make changes there",
            link.control_plane
        ),
    )
}

/// A data plane's `/status` section.
pub fn link_json(link: &DataPlaneStatus, serving: u64) -> Value {
    json!({
        "role": "data_plane",
        "control_plane": link.control_plane,
        "connected": link.connected(),
        "config_version": serving,
        "last_sync": link.last_sync(),
        "connects": link.connects(),
        "last_error": link.last_error(),
    })
}
