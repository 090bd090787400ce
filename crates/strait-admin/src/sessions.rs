//! `/sessions`: the `session` plugin's server-side sessions (`storage =
//! kong`), Kong's generated endpoints over its `sessions` table, here over
//! the node's runtime store (runtime data: no config version). `{key}` is
//! a row's id or its `session_id`, as Kong's `endpoint_key`.

use http::{Method, StatusCode};
use serde_json::{json, Value};
use strait_plugins::bundled::session::store::{self, SessionRow};
use strait_runtime::kv::KvError;

use crate::crud::pagination::parse_args;
use crate::errors::kong_error;
use crate::request::AdminRequest;
use crate::response::{empty_response, internal_error, json_response, not_found, AdminResponse};

/// Kong's JSON of a row (`ttl`: the seconds it has left).
fn row_json(row: &SessionRow) -> Value {
    json!({
        "id": row.id,
        "session_id": row.session_id,
        "expires": row.expires,
        "data": row.data,
        "created_at": row.created_at,
        "ttl": (row.expires - strait_runtime::kv::now()).max(0),
    })
}

fn store_failed(error: KvError) -> AdminResponse {
    match error {
        KvError::BadCursor => kong_error(StatusCode::BAD_REQUEST, 7, "invalid offset", Value::Null),
        KvError::Unavailable(detail) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({ "message": format!("the runtime store is unavailable: {detail}") }),
        ),
        KvError::Failed(detail) => internal_error(&detail),
    }
}

/// `GET /sessions`: a page of rows.
pub async fn collection(request: &AdminRequest) -> AdminResponse {
    let args = match parse_args(&request.query) {
        Ok(args) => args,
        Err(response) => return response,
    };
    match store::list(args.after.as_deref(), args.size).await {
        Ok((rows, next)) => {
            let data: Vec<Value> = rows.iter().map(row_json).collect();
            let mut body = json!({ "data": data, "next": Value::Null });
            if let Some(cursor) = next {
                body["next"] = json!(args.next_link("/sessions", &cursor));
                body["offset"] = json!(cursor);
            }
            json_response(StatusCode::OK, &body)
        }
        Err(error) => store_failed(error),
    }
}

/// `GET|DELETE /sessions/{id or session_id}`.
pub async fn entity(key: &str, request: &AdminRequest) -> AdminResponse {
    let found = match store::find(key).await {
        Ok(found) => found,
        Err(error) => return store_failed(error),
    };
    match (&request.method, found) {
        (&Method::DELETE, Some(row)) => match store::delete(&row).await {
            Ok(_) => empty_response(StatusCode::NO_CONTENT),
            Err(error) => store_failed(error),
        },
        (&Method::DELETE, None) => empty_response(StatusCode::NO_CONTENT),
        (_, Some(row)) => json_response(StatusCode::OK, &row_json(&row)),
        (_, None) => not_found(),
    }
}
