//! The blob store's settings: bucket, endpoint and prefix from the fleet's
//! typed configuration (`FLOTILLA_S3_*`), region and credentials the AWS way.
//!
//! With `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (and optionally
//! `AWS_SESSION_TOKEN`) set, those keys are used. Without them the store
//! asks the standard AWS credentials chain (`aws-config`): the shared
//! profile files, web identity tokens (IRSA on EKS), the ECS container
//! endpoint and EC2 instance metadata, in that order. The region is
//! `AWS_REGION` or `AWS_DEFAULT_REGION`, else `us-east-1`. Like
//! `Config::from_env`, the loader takes the environment as an argument so
//! tests never touch the process environment.

use std::collections::HashMap;
use std::time::Duration;

use flotilla_config::Config;
use flotilla_config::{ConfigError, Secret};

use super::object_keys::KeyLayout;

/// Region used when neither `AWS_REGION` nor `AWS_DEFAULT_REGION` is set.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Static credentials for signing requests.
#[derive(Debug, Clone)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

/// How a screenshot that may already be stored is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupStrategy {
    /// One `PUT` with `If-None-Match: *`; `412 Precondition Failed` means
    /// another task stored it first. One request per image, but a duplicate's
    /// bytes still cross the wire.
    ConditionalPut,
    /// `HEAD`, then a plain `PUT` only when absent: for stores that ignore
    /// `If-None-Match`. A duplicate costs one bodiless request, a new image
    /// two.
    HeadThenPut,
}

/// Everything `BlobStore::new` needs.
#[derive(Debug, Clone)]
pub struct BlobConfig {
    pub bucket: String,
    /// An S3-compatible endpoint; when set, requests use path-style
    /// addressing (`<endpoint>/<bucket>/<key>`).
    pub endpoint: Option<String>,
    pub layout: KeyLayout,
    pub region: String,
    /// Static keys, or `None` for the standard AWS credentials chain.
    pub credentials: Option<S3Credentials>,
    pub dedup: DedupStrategy,
    /// How many recently stored hashes each process remembers, to answer a
    /// repeated frame without any request; 0 turns the memory off.
    pub recent_hashes: usize,
    /// How long a remembered hash is trusted without asking the store.
    pub recent_ttl: Duration,
    pub connect_timeout: Duration,
    /// Limit on one HTTP attempt, body included.
    pub attempt_timeout: Duration,
    /// Attempts the SDK makes for one call before reporting a transient
    /// failure (longer outages are the uploader's to ride out).
    pub sdk_attempts: u32,
}

impl BlobConfig {
    /// The settings of `config` and the `AWS_*` variables among `vars`.
    pub fn from_env<I, K, V>(config: &Config, vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let env: HashMap<String, String> =
            vars.into_iter().map(|(k, v)| (k.into(), v.into())).filter(|(_, v)| !v.trim().is_empty()).collect();
        let bucket = config.s3.bucket.clone().ok_or_else(|| problem("FLOTILLA_S3_BUCKET", "is required to store screenshots"))?;
        validate_bucket(&bucket)?;
        let layout = KeyLayout::new(&config.s3.prefix).map_err(|p| problem("FLOTILLA_S3_PREFIX", p))?;
        let credentials = static_credentials(&env)?;
        let region = env
            .get("AWS_REGION")
            .or_else(|| env.get("AWS_DEFAULT_REGION"))
            .map(|r| r.trim().to_owned())
            .unwrap_or_else(|| DEFAULT_REGION.to_owned());
        if !region.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(problem("AWS_REGION", format!("{region:?} is not a region name like eu-west-1")));
        }
        Ok(Self {
            bucket,
            endpoint: config.s3.endpoint.clone(),
            layout,
            region,
            credentials,
            dedup: DedupStrategy::ConditionalPut,
            recent_hashes: 4096,
            recent_ttl: Duration::from_secs(3600),
            connect_timeout: Duration::from_secs(3),
            attempt_timeout: Duration::from_secs(30),
            sdk_attempts: 3,
        })
    }

    /// The settings from the process environment.
    pub fn from_process_env(config: &Config) -> Result<Self, ConfigError> {
        Self::from_env(config, std::env::vars())
    }

    /// The origin (`scheme://host[:port]`) presigned URLs point at: the
    /// endpoint's for an S3-compatible store (path-style), else the bucket's
    /// virtual host on AWS.
    pub fn origin(&self) -> String {
        match &self.endpoint {
            Some(url) => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
                let host = rest.split(['/', '?', '#']).next().unwrap_or(rest);
                format!("{scheme}://{host}")
            }
            None => format!("https://{}.s3.{}.amazonaws.com", self.bucket, self.region),
        }
    }

    /// Where requests go, for error messages.
    pub fn endpoint_label(&self) -> String {
        match &self.endpoint {
            Some(url) => url.clone(),
            None => format!("s3.{}.amazonaws.com", self.region),
        }
    }
}

/// The keys in the environment, `None` when there are none (the standard
/// chain then finds them); one half of a key pair alone is an error.
fn static_credentials(env: &HashMap<String, String>) -> Result<Option<S3Credentials>, ConfigError> {
    match (env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(problem("AWS_SECRET_ACCESS_KEY", "is required with AWS_ACCESS_KEY_ID")),
        (None, Some(_)) => Err(problem("AWS_ACCESS_KEY_ID", "is required with AWS_SECRET_ACCESS_KEY")),
        (Some(id), Some(secret)) => Ok(Some(S3Credentials {
            access_key_id: id.trim().to_owned(),
            secret_access_key: Secret::new(secret.trim()),
            session_token: env.get("AWS_SESSION_TOKEN").map(|t| Secret::new(t.trim())),
        })),
    }
}

fn problem(var: &str, text: impl Into<String>) -> ConfigError {
    ConfigError { var: var.to_owned(), problem: text.into() }
}

/// S3's bucket naming rules, loosely: 3–63 of `a-z 0-9 . -`, starting and
/// ending with a letter or digit.
fn validate_bucket(bucket: &str) -> Result<(), ConfigError> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-')
        && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
        && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(problem("FLOTILLA_S3_BUCKET", format!("{bucket:?} is not a bucket name (3-63 of a-z 0-9 . -)")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(flotilla: &[(&str, &str)], aws: &[(&str, &str)]) -> Result<BlobConfig, ConfigError> {
        let config = Config::from_env(flotilla.iter().map(|(k, v)| (k.to_string(), v.to_string()))).expect("fleet config");
        BlobConfig::from_env(&config, aws.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    const KEYS: &[(&str, &str)] = &[("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"), ("AWS_SECRET_ACCESS_KEY", "very-secret")];

    #[test]
    fn settings_come_from_both_sources() {
        let config = load(
            &[
                ("FLOTILLA_S3_BUCKET", "shots"),
                ("FLOTILLA_S3_ENDPOINT", "http://127.0.0.1:9000/"),
                ("FLOTILLA_S3_PREFIX", "fleet"),
            ],
            &[KEYS[0], KEYS[1], ("AWS_DEFAULT_REGION", "eu-west-1")],
        )
        .expect("loads");
        assert_eq!(config.bucket, "shots");
        assert_eq!(config.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(config.layout.prefix(), "fleet/");
        assert_eq!(config.region, "eu-west-1");
        assert!(!format!("{config:?}").contains("very-secret"), "the secret never prints");
    }

    #[test]
    fn a_missing_setting_names_its_variable() {
        assert_eq!(load(&[], KEYS).expect_err("no bucket").var, "FLOTILLA_S3_BUCKET");
        assert_eq!(load(&[("FLOTILLA_S3_BUCKET", "Bad_Bucket")], KEYS).expect_err("bad bucket").var, "FLOTILLA_S3_BUCKET");
        assert_eq!(load(&[("FLOTILLA_S3_BUCKET", "shots")], &[KEYS[1]]).expect_err("no key").var, "AWS_ACCESS_KEY_ID");
        assert_eq!(load(&[("FLOTILLA_S3_BUCKET", "shots")], &[KEYS[0]]).expect_err("no secret").var, "AWS_SECRET_ACCESS_KEY");
        assert_eq!(
            load(&[("FLOTILLA_S3_BUCKET", "shots"), ("FLOTILLA_S3_PREFIX", "a/../b")], KEYS).expect_err("bad prefix").var,
            "FLOTILLA_S3_PREFIX"
        );
    }

    #[test]
    fn without_keys_the_standard_chain_is_asked() {
        let config = load(&[("FLOTILLA_S3_BUCKET", "shots")], &[]).expect("loads");
        assert!(config.credentials.is_none());
        let config = load(&[("FLOTILLA_S3_BUCKET", "shots")], KEYS).expect("loads");
        assert_eq!(config.credentials.map(|c| c.access_key_id).as_deref(), Some("AKIAEXAMPLE"));
    }

    #[test]
    fn the_region_defaults() {
        let config = load(&[("FLOTILLA_S3_BUCKET", "shots")], KEYS).expect("loads");
        assert_eq!(config.region, DEFAULT_REGION);
        assert_eq!(config.endpoint_label(), "s3.us-east-1.amazonaws.com");
    }
}
