//! `GET /`: the dashboard, one page for people watching the fleet.
//!
//! The page, its script and its style sheet are compiled into the binary, so
//! there is no build step and nothing to deploy beside the API. The page holds
//! no data: it asks for an API key and calls the same `/v1` endpoints as any
//! client, so it sees only what that key's tenant may see.
//!
//! The script and the style sheet are served from their own paths so the
//! Content-Security-Policy can forbid inline code altogether. Screenshots are
//! presigned links into the configured S3 store, so images are the one thing
//! the page may load from elsewhere: from that store's origin only.

pub mod evals;

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderName;
use axum::response::IntoResponse;

use crate::state::AppState;

/// The page's markup.
const PAGE: &str = include_str!("index.html");
/// The page's behaviour: API calls, polling, the event stream reader.
const SCRIPT: &str = include_str!("dashboard.js");
/// The batches panel's script.
const BATCHES_SCRIPT: &str = include_str!("batches.js");
/// The task timeline's script.
const TIMELINE_SCRIPT: &str = include_str!("timeline.js");
/// The page's look.
const STYLE: &str = include_str!("dashboard.css");

/// The charting library of the usage view, uPlot 1.6.31 (MIT, see
/// `vendor/UPLOT-LICENSE`), served as it is published.
const CHART_SCRIPT: &str = include_str!("vendor/uplot.min.js");
/// The charting library's style sheet.
const CHART_STYLE: &str = include_str!("vendor/uplot.min.css");

/// Where the charting library is served.
pub const CHART_SCRIPT_PATH: &str = "/uplot.js";
/// Where the charting library's style sheet is served.
pub const CHART_STYLE_PATH: &str = "/uplot.css";

/// Where the page's script is served.
pub const SCRIPT_PATH: &str = "/dashboard.js";
/// Where the batches panel's script is served.
pub const BATCHES_SCRIPT_PATH: &str = "/batches.js";
/// Where the task timeline's script is served.
pub const TIMELINE_SCRIPT_PATH: &str = "/timeline.js";
/// Where the page's style sheet is served.
pub const STYLE_PATH: &str = "/dashboard.css";

/// What the page may load and run: its own script and style only, calls to
/// this API only, frames from here (the live view's noVNC page), images from here or from the origin of the S3 store the
/// screenshot links point at (`store_origin`, none without a store).
pub fn content_security_policy(store_origin: Option<&str>) -> String {
    let store = store_origin.map(|origin| format!(" {origin}")).unwrap_or_default();
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:{store}; connect-src 'self'; \
         frame-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
}

/// Headers every dashboard response carries.
pub(crate) fn security_headers(state: &AppState, content_type: &'static str) -> [(HeaderName, String); 6] {
    let policy = content_security_policy(state.blobs().map(|b| b.origin()));
    [
        (CONTENT_TYPE, content_type.to_owned()),
        (CACHE_CONTROL, "no-cache".to_owned()),
        (HeaderName::from_static("content-security-policy"), policy),
        (HeaderName::from_static("x-content-type-options"), "nosniff".to_owned()),
        (HeaderName::from_static("referrer-policy"), "no-referrer".to_owned()),
        (HeaderName::from_static("x-frame-options"), "DENY".to_owned()),
    ]
}

/// The dashboard page; it asks for an API key before it calls anything.
#[utoipa::path(
    get,
    path = "/",
    tag = "operations",
    responses((status = 200, description = "The dashboard: an HTML page with its script at /dashboard.js and its style at /dashboard.css; it calls the /v1 endpoints with a key typed into it", body = String, content_type = "text/html"))
)]
pub async fn page(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/html; charset=utf-8"), PAGE)
}

/// The dashboard's script.
pub async fn script(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/javascript; charset=utf-8"), SCRIPT)
}

/// The batches panel's script.
pub async fn batches_script(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/javascript; charset=utf-8"), BATCHES_SCRIPT)
}

/// The task timeline's script.
pub async fn timeline_script(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/javascript; charset=utf-8"), TIMELINE_SCRIPT)
}

/// The dashboard's style sheet.
pub async fn style(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/css; charset=utf-8"), STYLE)
}

/// The charting library of the usage view.
pub async fn chart_script(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/javascript; charset=utf-8"), CHART_SCRIPT)
}

/// The charting library's style sheet.
pub async fn chart_style(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/css; charset=utf-8"), CHART_STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding "Dashboard CSP": `img-src` allowed any host; now only this
    /// API and the configured store's origin.
    #[test]
    fn images_come_only_from_here_and_the_store() {
        let policy = content_security_policy(Some("http://127.0.0.1:9000"));
        assert!(
            policy.contains("script-src 'self'") && policy.contains("img-src 'self' data: http://127.0.0.1:9000;"),
            "{policy}"
        );
        assert!(!policy.contains(" http: ") && !policy.contains(" https:"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        assert!(content_security_policy(None).contains("img-src 'self' data:;"));
    }

    #[test]
    fn the_page_links_its_assets_and_has_no_inline_code() {
        assert!(PAGE.contains(&format!(r#"<script src="{SCRIPT_PATH}" defer></script>"#)));
        assert!(PAGE.contains(&format!(r#"<script src="{BATCHES_SCRIPT_PATH}" defer></script>"#)));
        assert!(PAGE.contains(&format!(r#"<script src="{TIMELINE_SCRIPT_PATH}" defer></script>"#)));
        assert!(PAGE.contains(&format!(r#"<link rel="stylesheet" href="{STYLE_PATH}">"#)));
        for inline in ["<script>", "<style", "style=", "onclick", "onload", "onsubmit", "onerror", "javascript:"] {
            assert!(!PAGE.contains(inline), "the page has inline code: {inline}");
        }
    }

    #[test]
    fn the_script_never_parses_text_as_markup() {
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!SCRIPT.contains(sink), "the script uses {sink}");
            assert!(!BATCHES_SCRIPT.contains(sink), "the batches script uses {sink}");
            assert!(!TIMELINE_SCRIPT.contains(sink), "the timeline script uses {sink}");
        }
    }
}
