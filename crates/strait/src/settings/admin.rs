//! The admin UI's settings (Kong's `admin_gui_*`).

use anyhow::{anyhow, bail, Result};
use strait_proxy::{parse_listen, ListenSpec};

use super::RawSettings;

/// The admin UI's settings.
#[derive(Debug, Clone)]
pub struct AdminGui {
    pub listen: Vec<ListenSpec>,
    /// `admin_gui_url`: the URLs the UI is reached at.
    pub urls: Vec<String>,
    /// `admin_gui_path`: where under its listener the UI is served.
    pub path: String,
    /// `admin_gui_api_url`.
    pub api_url: Option<String>,
}

/// `admin_gui_listen`, `admin_gui_url`, `admin_gui_path`, `admin_gui_api_url`.
pub(super) fn admin_gui(raw: &RawSettings) -> Result<AdminGui> {
    let admin_gui = AdminGui {
        listen: parse_listen(raw.get("admin_gui_listen")).map_err(|e| anyhow!("admin_gui_listen: {e}"))?,
        urls: {
            let urls: Vec<String> = raw
                .get("admin_gui_url")
                .split(',')
                .map(|url| url.trim().to_string())
                .filter(|url| !url.is_empty())
                .collect();
            if let Some(bad) = urls.iter().find(|url| strait_admin::origin::origin_of(url).is_none()) {
                bail!("admin_gui_url: expected http:// or https:// URLs (got {bad:?})");
            }
            urls
        },
        path: match raw.get("admin_gui_path").trim() {
            path if path.starts_with('/') && !path.contains(['?', '#', ' ']) => path.trim_end_matches('/').to_string(),
            other => bail!("admin_gui_path: expected a path starting with / (got {other:?})"),
        },
        api_url: match Some(raw.get("admin_gui_api_url").trim().to_string()).filter(|url| !url.is_empty()) {
            Some(url) if strait_admin::origin::origin_of(&url).is_none() => {
                bail!("admin_gui_api_url: expected an http:// or https:// URL (got {url:?})")
            }
            url => url.map(|url| url.trim_end_matches('/').to_string()),
        },
    };
    if admin_gui.listen.iter().any(|spec| spec.ssl) {
        bail!("admin_gui_listen: ssl is not supported on the admin UI's listener (put a TLS proxy route in front)");
    }
    Ok(admin_gui)
}
