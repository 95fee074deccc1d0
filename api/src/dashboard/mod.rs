//! `GET /`: the dashboard, one page for people watching the fleet.
//!
//! The page, its script and its style sheet are compiled into the binary, so
//! there is no build step and nothing to deploy beside the API. The page holds
//! no data: it asks for an API key and calls the same `/v1` endpoints as any
//! client, so it sees only what that key's tenant may see.
//!
//! The script and the style sheet are served from their own paths so the
//! Content-Security-Policy can forbid inline code altogether. Screenshots are
//! presigned links into the configured S3 store, which may live on any host,
//! so images are the one thing the page may load from elsewhere.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderName;
use axum::response::IntoResponse;

/// The page's markup.
const PAGE: &str = include_str!("index.html");
/// The page's behaviour: API calls, polling, the event stream reader.
const SCRIPT: &str = include_str!("dashboard.js");
/// The page's look.
const STYLE: &str = include_str!("dashboard.css");

/// Where the page's script is served.
pub const SCRIPT_PATH: &str = "/dashboard.js";
/// Where the page's style sheet is served.
pub const STYLE_PATH: &str = "/dashboard.css";

/// What the page may load and run: its own script and style only, calls to
/// this API only, images from here or from the S3 store the screenshot links
/// point at.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data: http: https:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Headers every dashboard response carries.
fn security_headers(content_type: &'static str) -> [(HeaderName, &'static str); 6] {
    [
        (CONTENT_TYPE, content_type),
        (CACHE_CONTROL, "no-cache"),
        (HeaderName::from_static("content-security-policy"), CONTENT_SECURITY_POLICY),
        (HeaderName::from_static("x-content-type-options"), "nosniff"),
        (HeaderName::from_static("referrer-policy"), "no-referrer"),
        (HeaderName::from_static("x-frame-options"), "DENY"),
    ]
}

/// The dashboard page; it asks for an API key before it calls anything.
#[utoipa::path(
    get,
    path = "/",
    tag = "operations",
    responses((status = 200, description = "The dashboard: an HTML page with its script at /dashboard.js and its style at /dashboard.css; it calls the /v1 endpoints with a key typed into it", body = String, content_type = "text/html"))
)]
pub async fn page() -> impl IntoResponse {
    (security_headers("text/html; charset=utf-8"), PAGE)
}

/// The dashboard's script.
pub async fn script() -> impl IntoResponse {
    (security_headers("text/javascript; charset=utf-8"), SCRIPT)
}

/// The dashboard's style sheet.
pub async fn style() -> impl IntoResponse {
    (security_headers("text/css; charset=utf-8"), STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::Response;

    fn header<'a>(response: &'a Response, name: &str) -> &'a str {
        response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    #[tokio::test]
    async fn the_page_is_html_under_a_policy_without_inline_code() {
        let response = page().await.into_response();
        assert_eq!(response.status(), 200);
        assert!(header(&response, "content-type").starts_with("text/html"));
        let policy = header(&response, "content-security-policy");
        assert!(policy.contains("script-src 'self'") && policy.contains("img-src 'self' data: http: https:"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
        assert_eq!(header(&response, "x-content-type-options"), "nosniff");
    }

    #[tokio::test]
    async fn script_and_style_carry_their_own_types() {
        assert!(header(&script().await.into_response(), "content-type").starts_with("text/javascript"));
        assert!(header(&style().await.into_response(), "content-type").starts_with("text/css"));
    }

    #[test]
    fn the_page_links_its_assets_and_has_no_inline_code() {
        assert!(PAGE.contains(&format!(r#"<script src="{SCRIPT_PATH}" defer></script>"#)));
        assert!(PAGE.contains(&format!(r#"<link rel="stylesheet" href="{STYLE_PATH}">"#)));
        for inline in ["<script>", "<style", "style=", "onclick", "onload", "onsubmit", "onerror", "javascript:"] {
            assert!(!PAGE.contains(inline), "the page has inline code: {inline}");
        }
    }

    #[test]
    fn the_script_never_parses_text_as_markup() {
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!SCRIPT.contains(sink), "the script uses {sink}");
        }
    }
}
