//! What can go wrong when storing or reading a blob, said so that a caller
//! knows what failed and whether trying again can help.
//!
//! The S3 SDK reports failures as a tree of dispatch, timeout and service
//! errors; `s3.rs` folds them into these variants in one place, so no caller
//! ever matches on SDK types.

/// A blob store operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    /// No connection could be made (refused, reset, DNS, TLS handshake).
    #[error("blob store at {endpoint} is unreachable: {detail}")]
    Unreachable { endpoint: String, detail: String },
    /// The store accepted the connection but did not answer in time.
    #[error("blob store at {endpoint} timed out: {detail}")]
    Timeout { endpoint: String, detail: String },
    /// The store does not accept these credentials (unknown key, wrong
    /// secret, expired token).
    #[error(
        "blob store rejected the credentials ({code}): check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN"
    )]
    BadCredentials { code: String, message: String },
    /// The credentials are valid but may not do this.
    #[error("access denied to bucket {bucket}: {message}")]
    AccessDenied { bucket: String, message: String },
    /// The configured bucket does not exist.
    #[error("bucket {bucket} does not exist (FLOTILLA_S3_BUCKET)")]
    NoSuchBucket { bucket: String },
    /// The object asked for is not stored.
    #[error("no object at key {key}")]
    NotFound { key: String },
    /// The store asks us to slow down (429, 503 SlowDown).
    #[error("blob store is throttling requests ({code})")]
    Throttled { code: String },
    /// A conditional write raced another one for the same key (S3's 409
    /// `ConditionalRequestConflict`); the next try sees the winner's object.
    #[error("a concurrent write to key {key} is in progress")]
    Conflict { key: String },
    /// The store failed on its side (5xx).
    #[error("blob store failed with {status} {code}: {message}")]
    Server { status: u16, code: String, message: String },
    /// The answer could not be read (cut off, not XML, …).
    #[error("unreadable answer from the blob store: {detail}")]
    BadResponse { detail: String },
    /// The store refused the request as malformed or not allowed (other 4xx).
    #[error("blob store refused the request with {status} {code}: {message}")]
    Rejected { status: u16, code: String, message: String },
    /// The settings cannot work (bad TTL, request that could not be built).
    #[error("blob store settings: {0}")]
    Config(String),
    /// An artifact path that would leave the task's artifact prefix or is
    /// not a plain relative path.
    #[error("artifact path {path:?} {reason}")]
    InvalidPath { path: String, reason: &'static str },
    /// Bytes handed in as a screenshot are not a PNG image.
    #[error("screenshot of {bytes} bytes is not a PNG image")]
    NotPng { bytes: usize },
}

impl BlobError {
    /// Whether the same request may succeed later without anyone changing
    /// the settings, the credentials or the input.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            BlobError::Unreachable { .. }
                | BlobError::Timeout { .. }
                | BlobError::Throttled { .. }
                | BlobError::Conflict { .. }
                | BlobError::Server { .. }
                | BlobError::BadResponse { .. }
        )
    }

    /// A short stable name of the failure, for logs and metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            BlobError::Unreachable { .. } => "unreachable",
            BlobError::Timeout { .. } => "timeout",
            BlobError::BadCredentials { .. } => "bad_credentials",
            BlobError::AccessDenied { .. } => "access_denied",
            BlobError::NoSuchBucket { .. } => "no_such_bucket",
            BlobError::NotFound { .. } => "not_found",
            BlobError::Throttled { .. } => "throttled",
            BlobError::Conflict { .. } => "conflict",
            BlobError::Server { .. } => "server",
            BlobError::BadResponse { .. } => "bad_response",
            BlobError::Rejected { .. } => "rejected",
            BlobError::Config(_) => "config",
            BlobError::InvalidPath { .. } => "invalid_path",
            BlobError::NotPng { .. } => "not_png",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retryable() {
        let transient = BlobError::Unreachable { endpoint: "http://127.0.0.1:1".into(), detail: "connection refused".into() };
        assert!(transient.is_retryable());
        let creds = BlobError::BadCredentials { code: "SignatureDoesNotMatch".into(), message: String::new() };
        assert!(!creds.is_retryable());
        assert!(creds.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{creds}");
        assert!(!BlobError::NoSuchBucket { bucket: "b".into() }.is_retryable());
        assert!(BlobError::Server { status: 500, code: "InternalError".into(), message: String::new() }.is_retryable());
    }
}
