//! The evaluation comparison page at `/evals`: two runs of a suite (two
//! batches' reports, `GET /v1/batches/{id}/report`) side by side, per model
//! and pipeline and per task, with what newly fails first. Like the
//! dashboard, a plain client of the `/v1` API with the key typed in (or the
//! dashboard's, from the tab's session storage), served under the same
//! policy; `/evals#before=bat_…&after=bat_…` fills the two batches in.

use axum::extract::State;
use axum::response::IntoResponse;

use super::security_headers;
use crate::state::AppState;

const PAGE: &str = include_str!("evals.html");
const SCRIPT: &str = include_str!("evals.js");
const STYLE: &str = include_str!("evals.css");

/// Where the page is served.
pub const PAGE_PATH: &str = "/evals";
/// Where its script is served.
pub const SCRIPT_PATH: &str = "/evals.js";
/// Where its style is served.
pub const STYLE_PATH: &str = "/evals.css";

/// The comparison page.
#[utoipa::path(
    get,
    path = "/evals",
    tag = "operations",
    responses((status = 200, description = "The comparison of two runs of an evaluation suite: an HTML page with its script at /evals.js; it reads two batches' reports with a key typed into it", body = String, content_type = "text/html"))
)]
pub async fn page(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/html; charset=utf-8"), PAGE)
}

pub async fn script(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/javascript; charset=utf-8"), SCRIPT)
}

pub async fn style(State(state): State<AppState>) -> impl IntoResponse {
    (security_headers(&state, "text/css; charset=utf-8"), STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_links_its_assets_and_its_script_never_parses_text_as_markup() {
        assert!(PAGE.contains(&format!(r#"<script src="{SCRIPT_PATH}" defer></script>"#)));
        assert!(PAGE.contains(&format!(r#"<link rel="stylesheet" href="{STYLE_PATH}">"#)));
        for inline in ["<script>", "<style", "style=", "onclick", "onsubmit", "javascript:"] {
            assert!(!PAGE.contains(inline), "the page has inline code: {inline}");
        }
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!SCRIPT.contains(sink), "the script uses {sink}");
        }
    }
}
