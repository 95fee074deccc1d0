//! The S3 protocol side of the blob store: one `aws-sdk-s3` client, the few
//! calls the store makes, and the one place where SDK errors become
//! [`BlobError`]s.
//!
//! Credentials are the configured keys, or else the standard AWS chain.
//! The client works against AWS and S3-compatible stores alike: with an
//! endpoint override it uses path-style addressing, it asks for checksums
//! only where S3 requires them (several compatible stores reject the SDK's
//! default streaming checksums), and it retries a transient failure a couple
//! of times with a short backoff before handing it to the caller.

use std::time::Duration;

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_credential_types::provider::{future, ProvideCredentials, SharedCredentialsProvider};
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;

use super::config::BlobConfig;
use super::error::BlobError;

/// The type a downloaded object is served with: nothing a browser renders.
const DOWNLOAD_TYPE: &str = "application/octet-stream";

/// How a presigned object reaches a browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Shown in place: raster images only.
    Inline,
    /// Saved as a file, with a type no browser renders, so agent-written
    /// HTML or SVG never runs on the store's origin.
    Download,
}

/// Longest validity S3 accepts for a SigV4 presigned URL.
pub const MAX_PRESIGN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a create-only `PUT` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Created,
    /// `412 Precondition Failed`: an object already has this key.
    AlreadyExists,
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
}

/// The bucket, through the SDK.
#[derive(Clone)]
pub(crate) struct S3Bucket {
    client: aws_sdk_s3::Client,
    bucket: String,
    endpoint: String,
}

impl S3Bucket {
    pub fn new(config: &BlobConfig) -> Self {
        let region = Region::new(config.region.clone());
        let credentials = match &config.credentials {
            Some(keys) => SharedCredentialsProvider::new(Credentials::new(
                keys.access_key_id.clone(),
                keys.secret_access_key.expose().to_owned(),
                keys.session_token.as_ref().map(|t| t.expose().to_owned()),
                None,
                "flotilla-env",
            )),
            None => SharedCredentialsProvider::new(StandardChain::new(region.clone())),
        };
        let retry = RetryConfig::standard()
            .with_max_attempts(config.sdk_attempts.max(1))
            .with_initial_backoff(Duration::from_millis(100))
            .with_max_backoff(Duration::from_secs(1));
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(config.connect_timeout)
            .operation_attempt_timeout(config.attempt_timeout)
            .build();
        let mut builder = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(region)
            .credentials_provider(credentials)
            .retry_config(retry)
            .timeout_config(timeouts)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint.clone()).force_path_style(true);
        }
        Self {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: config.bucket.clone(),
            endpoint: config.endpoint_label(),
        }
    }

    /// Writes `body` at `key`; with `create_only`, sends `If-None-Match: *`
    /// and reports an existing object instead of replacing it.
    pub async fn put(&self, key: &str, body: Bytes, content_type: &str, create_only: bool) -> Result<PutOutcome, BlobError> {
        let mut request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .content_length(body.len() as i64)
            .body(ByteStream::from(body));
        if create_only {
            request = request.if_none_match("*");
        }
        match request.send().await {
            Ok(_) => Ok(PutOutcome::Created),
            Err(err) if create_only && status_of(&err) == Some(412) => Ok(PutOutcome::AlreadyExists),
            Err(err) => Err(self.classify(err, key)),
        }
    }

    /// The size of the object at `key`, or `None` when there is none.
    pub async fn head(&self, key: &str) -> Result<Option<u64>, BlobError> {
        match self.client.head_object().bucket(&self.bucket).key(key).send().await {
            Ok(out) => Ok(Some(out.content_length().unwrap_or(0).max(0) as u64)),
            Err(err) => match self.classify(err, key) {
                BlobError::NotFound { .. } => Ok(None),
                other => Err(other),
            },
        }
    }

    /// The bytes at `key`.
    pub async fn get(&self, key: &str) -> Result<Bytes, BlobError> {
        let out = self.client.get_object().bucket(&self.bucket).key(key).send().await.map_err(|e| self.classify(e, key))?;
        let body =
            out.body.collect().await.map_err(|e| BlobError::BadResponse { detail: format!("body of {key} cut off: {e}") })?;
        Ok(body.into_bytes())
    }

    /// Every object whose key starts with `prefix`, in key order.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, BlobError> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| self.classify(e, prefix))?;
            objects.extend(
                out.contents()
                    .iter()
                    .filter_map(|o| Some(ObjectInfo { key: o.key()?.to_owned(), size: o.size().unwrap_or(0).max(0) as u64 })),
            );
            match out.next_continuation_token() {
                Some(next) if out.is_truncated() == Some(true) => token = Some(next.to_owned()),
                _ => return Ok(objects),
            }
        }
    }

    /// At most `max` keys under `prefix` that sort after `start_after`, in
    /// key order (one request).
    pub async fn list_after(&self, prefix: &str, start_after: &str, max: i32) -> Result<Vec<ObjectInfo>, BlobError> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .start_after(start_after)
            .max_keys(max)
            .send()
            .await
            .map_err(|e| self.classify(e, prefix))?;
        Ok(out
            .contents()
            .iter()
            .filter_map(|o| Some(ObjectInfo { key: o.key()?.to_owned(), size: o.size().unwrap_or(0).max(0) as u64 }))
            .collect())
    }

    /// Deletes the object at `key`; deleting what is not there succeeds.
    pub async fn delete(&self, key: &str) -> Result<(), BlobError> {
        match self.client.delete_object().bucket(&self.bucket).key(key).send().await {
            Ok(_) => Ok(()),
            Err(err) => match self.classify(err, key) {
                BlobError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Lists at most one key under `prefix`: proves the bucket exists and the
    /// credentials may read it, with an error body that says why not (a
    /// `HEAD` answers 403 or 404 without one).
    pub async fn probe_bucket(&self, prefix: &str) -> Result<(), BlobError> {
        self.client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .max_keys(1)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.classify(e, prefix))
    }

    /// A URL that lets anyone holding it `GET` the object for `ttl`.
    /// `delivery` says whether a browser may show it in place or must
    /// download it (the signed `response-content-disposition` and
    /// `response-content-type` overrides).
    pub async fn presign_get(&self, key: &str, ttl: Duration, delivery: Delivery) -> Result<String, BlobError> {
        if ttl < Duration::from_secs(1) || ttl > MAX_PRESIGN_TTL {
            return Err(BlobError::Config(format!("a presigned URL lives between 1 s and 7 days, not {ttl:?}")));
        }
        let presigning = PresigningConfig::expires_in(ttl).map_err(|e| BlobError::Config(e.to_string()))?;
        let mut get = self.client.get_object().bucket(&self.bucket).key(key);
        if delivery == Delivery::Download {
            get = get.response_content_disposition("attachment").response_content_type(DOWNLOAD_TYPE);
        }
        let request = get.presigned(presigning).await.map_err(|e| self.classify(e, key))?;
        Ok(request.uri().to_owned())
    }

    /// Folds an SDK failure into what it means for the caller.
    fn classify<E>(&self, err: SdkError<E, HttpResponse>, key: &str) -> BlobError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let endpoint = self.endpoint.clone();
        match &err {
            SdkError::ConstructionFailure(_) => BlobError::Config(DisplayErrorContext(&err).to_string()),
            SdkError::TimeoutError(_) => BlobError::Timeout { endpoint, detail: DisplayErrorContext(&err).to_string() },
            SdkError::DispatchFailure(failure) if failure.is_timeout() => {
                BlobError::Timeout { endpoint, detail: DisplayErrorContext(&err).to_string() }
            }
            SdkError::DispatchFailure(failure) if failure.is_user() => BlobError::Config(DisplayErrorContext(&err).to_string()),
            SdkError::DispatchFailure(_) => BlobError::Unreachable { endpoint, detail: DisplayErrorContext(&err).to_string() },
            SdkError::ResponseError(_) => BlobError::BadResponse { detail: DisplayErrorContext(&err).to_string() },
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                let code = service.err().code().unwrap_or_default().to_owned();
                let message = service.err().message().unwrap_or_default().to_owned();
                self.classify_status(status, code, message, key)
            }
            _ => BlobError::BadResponse { detail: DisplayErrorContext(&err).to_string() },
        }
    }

    fn classify_status(&self, status: u16, code: String, message: String, key: &str) -> BlobError {
        let bucket = self.bucket.clone();
        match (status, code.as_str()) {
            (_, "NoSuchBucket") => BlobError::NoSuchBucket { bucket },
            (_, "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired") => {
                BlobError::BadCredentials { code, message }
            }
            (_, "SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded") | (429, _) => {
                BlobError::Throttled { code }
            }
            (_, "RequestTimeout") => BlobError::Timeout { endpoint: self.endpoint.clone(), detail: message },
            (_, "ConditionalRequestConflict") => BlobError::Conflict { key: key.to_owned() },
            (403, _) => BlobError::AccessDenied {
                bucket,
                message: if message.is_empty() {
                    format!("403 {code} on {key} (bad credentials or a missing permission)")
                } else {
                    message
                },
            },
            (404, _) => BlobError::NotFound { key: key.to_owned() },
            (500..=599, _) => BlobError::Server { status, code, message },
            _ => BlobError::Rejected { status, code, message },
        }
    }
}

/// The standard AWS credentials chain (environment, profile files, web
/// identity, ECS, EC2 instance metadata), built on first use: building it
/// reads files and so cannot happen while the store is constructed.
#[derive(Debug)]
struct StandardChain {
    region: Region,
    chain: tokio::sync::OnceCell<DefaultCredentialsChain>,
}

impl StandardChain {
    fn new(region: Region) -> Self {
        Self { region, chain: tokio::sync::OnceCell::new() }
    }
}

impl ProvideCredentials for StandardChain {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            let chain = self.chain.get_or_init(|| DefaultCredentialsChain::builder().region(self.region.clone()).build()).await;
            chain.provide_credentials().await
        })
    }
}

/// The HTTP status of a failed call, when the store answered one.
fn status_of<E>(err: &SdkError<E, HttpResponse>) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}
