//! The bounds every request runs under: a time limit on every route but
//! the event streams (which stay open by design), and a cap on requests
//! served at once, API-wide, beyond which requests wait their turn (and
//! time out if that takes too long).

use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Answers `timeout` when the request takes longer than `limit`.
pub async fn time_limit(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::TimedOut(limit.as_millis()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    async fn slow() -> &'static str {
        tokio::time::sleep(Duration::from_secs(5)).await;
        "late"
    }

    #[tokio::test]
    async fn a_request_past_the_time_limit_gets_a_json_timeout() {
        let app = Router::new()
            .route("/slow", get(slow))
            .route("/fast", get(|| async { "ok" }))
            .route_layer(axum::middleware::from_fn_with_state(Duration::from_millis(50), time_limit));
        let answer = app.clone().oneshot(Request::get("/slow").body(Body::empty()).expect("request")).await.expect("answer");
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        let bytes = http_body_util::BodyExt::collect(answer.into_body()).await.expect("body").to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(body["error"]["code"], "timeout");
        let answer = app.oneshot(Request::get("/fast").body(Body::empty()).expect("request")).await.expect("answer");
        assert_eq!(answer.status(), StatusCode::OK);
    }
}
