//! The sections of the outside services a worker uses: where desktops come
//! from (local or E2B) and how many, the E2B account, the model providers
//! (OpenAI, Anthropic; Claude's tool override and Gemini are in
//! `computer_use.rs`) and the S3 bucket screenshots go to.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{ConfigError, Secret, Settings};
use flotilla_types::task::SandboxProviderKind;

/// The OpenAI computer tool generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiToolVersion {
    /// The GA `computer` tool, whose calls may batch actions.
    Ga,
    /// `computer_use_preview` with model `computer-use-preview`.
    Preview,
}

/// Where tasks get desktops and how many.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// `FLOTILLA_SANDBOX_PROVIDER`: none: only tasks that need no screen run.
    pub provider: Option<SandboxProviderKind>,
    /// `FLOTILLA_SANDBOX_WARM`: ready sandboxes each worker keeps in its
    /// warm pools, by template: a bare count is the default template's,
    /// `desktop=1,browser=2` gives each template its own.
    pub warm: BTreeMap<String, usize>,
    /// `FLOTILLA_SANDBOX_MAX`: sandboxes one worker may hold at once, pooled ones included.
    pub max: usize,
    /// `FLOTILLA_SANDBOX_FLEET_MAX`: sandboxes the whole fleet may hold at once
    /// (a provider's concurrency limit), counted in Redis; no fleet-wide cap when unset.
    pub fleet_max: Option<usize>,
}

impl SandboxConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            provider: parse_sandbox_provider(s.get("FLOTILLA_SANDBOX_PROVIDER"))?,
            warm: parse_warm(s.get("FLOTILLA_SANDBOX_WARM"))?,
            max: s.positive("FLOTILLA_SANDBOX_MAX", 16)?,
            fleet_max: match s.get("FLOTILLA_SANDBOX_FLEET_MAX") {
                Some(_) => Some(s.positive("FLOTILLA_SANDBOX_FLEET_MAX", 1)?),
                None => None,
            },
        })
    }

    /// Ready sandboxes to keep of `template`.
    pub fn warm_of(&self, template: &str) -> usize {
        self.warm.get(template).copied().unwrap_or(0)
    }

    /// Ready sandboxes to keep of every template together.
    pub fn warm_total(&self) -> usize {
        self.warm.values().sum()
    }
}

/// `N` (the default template's count) or `template=N` pairs, comma-separated.
fn parse_warm(raw: Option<&str>) -> Result<BTreeMap<String, usize>, ConfigError> {
    const VAR: &str = "FLOTILLA_SANDBOX_WARM";
    let mut counts = BTreeMap::new();
    let Some(raw) = raw else { return Ok(counts) };
    let count =
        |text: &str| text.trim().parse::<usize>().map_err(|_| ConfigError::new(VAR, format!("{text:?} is not a whole number")));
    if !raw.contains('=') {
        counts.insert(super::DEFAULT_TEMPLATE.to_owned(), count(raw)?);
        return Ok(counts);
    }
    for pair in raw.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
        let Some((template, n)) = pair.split_once('=') else {
            return Err(ConfigError::new(VAR, format!("{pair:?} is not template=count")));
        };
        if counts.insert(template.trim().to_owned(), count(n)?).is_some() {
            return Err(ConfigError::new(VAR, format!("template {:?} is given twice", template.trim())));
        }
    }
    Ok(counts)
}

/// The E2B account remote desktops are started under.
#[derive(Debug, Clone)]
pub struct E2bAccount {
    /// `E2B_API_KEY`.
    pub api_key: Option<Secret>,
    /// `E2B_DOMAIN`.
    pub domain: String,
    /// `E2B_API_URL`: the control plane, in place of `https://api.<domain>`
    /// (as the official SDKs take it for self-hosted and local E2B).
    pub api_url: Option<String>,
    /// `E2B_SANDBOX_URL`: one address for every sandbox's envd, which
    /// routes by the `E2b-Sandbox-Id` header, in place of each sandbox's
    /// own `https://49983-<id>.<domain>`.
    pub sandbox_url: Option<String>,
}

impl E2bAccount {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            api_key: s.get("E2B_API_KEY").map(Secret::new),
            domain: s.text("E2B_DOMAIN", "e2b.app").to_owned(),
            api_url: s.url("E2B_API_URL")?,
            sandbox_url: s.url("E2B_SANDBOX_URL")?,
        })
    }
}

/// The model providers' accounts, tools and defaults.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// `OPENAI_API_KEY`.
    pub openai_api_key: Option<Secret>,
    /// `OPENAI_BASE_URL`.
    pub openai_base_url: String,
    /// `FLOTILLA_OPENAI_TOOL`: `ga` (the `computer` tool) or `preview`
    /// (`computer_use_preview`).
    pub openai_tool: OpenAiToolVersion,
    /// `FLOTILLA_OPENAI_MODEL`: the model for `openai-cua` tasks that name
    /// none; the tool's default when unset.
    pub openai_model: Option<String>,
    /// `ANTHROPIC_API_KEY`.
    pub anthropic_api_key: Option<Secret>,
    /// `ANTHROPIC_BASE_URL`.
    pub anthropic_base_url: String,
    /// `FLOTILLA_ANTHROPIC_MODEL`: the model for `claude-computer-use` tasks
    /// that name none.
    pub anthropic_model: String,
    /// `FLOTILLA_MODEL_SCREEN`: the largest screen a model is shown; bigger
    /// screens are scaled down.
    pub screen: (u32, u32),
}

impl ModelConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            openai_api_key: s.get("OPENAI_API_KEY").map(Secret::new),
            openai_base_url: s.url("OPENAI_BASE_URL")?.unwrap_or_else(|| "https://api.openai.com/v1".into()),
            openai_tool: match s.text("FLOTILLA_OPENAI_TOOL", "ga").trim() {
                "ga" => OpenAiToolVersion::Ga,
                "preview" => OpenAiToolVersion::Preview,
                other => return Err(ConfigError::new("FLOTILLA_OPENAI_TOOL", format!("{other:?} is not one of ga, preview"))),
            },
            openai_model: s.get("FLOTILLA_OPENAI_MODEL").map(|m| m.trim().to_owned()),
            anthropic_api_key: s.get("ANTHROPIC_API_KEY").map(Secret::new),
            anthropic_base_url: s.url("ANTHROPIC_BASE_URL")?.unwrap_or_else(|| "https://api.anthropic.com".into()),
            anthropic_model: s.text("FLOTILLA_ANTHROPIC_MODEL", "claude-opus-5-5").trim().to_owned(),
            screen: parse_screen(s.text("FLOTILLA_MODEL_SCREEN", "1024x768"))?,
        })
    }
}

/// The S3 bucket screenshots and files go to.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// `FLOTILLA_S3_BUCKET`: no blob store when unset.
    pub bucket: Option<String>,
    /// `FLOTILLA_S3_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `FLOTILLA_S3_PREFIX`.
    pub prefix: String,
    /// `FLOTILLA_S3_URL_TTL_S`: how long the presigned URLs the API hands out stay valid.
    pub url_ttl: Duration,
    /// `FLOTILLA_PROFILE_KEY`: the key saved browser profiles are sealed
    /// with in the store (64 hex digits); without it a worker refuses
    /// tasks that name a `sandbox.profile`.
    pub profile_key: Option<ProfileKey>,
}

/// The 32-byte key that seals saved browser profiles; its `Debug` hides it
/// and it is wiped when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct ProfileKey(zeroize::Zeroizing<[u8; 32]>);

impl ProfileKey {
    /// Reads a key written as 64 hex digits.
    pub fn from_hex(text: &str) -> Result<Self, ConfigError> {
        let mut key = zeroize::Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(text.trim(), key.as_mut_slice()).map_err(|_| {
            ConfigError::new("FLOTILLA_PROFILE_KEY", "must be 64 hex digits (32 bytes; `openssl rand -hex 32` makes one)")
        })?;
        Ok(Self(key))
    }

    /// The key's bytes, for the one place that seals and opens profiles.
    pub fn expose(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for ProfileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProfileKey(***)")
    }
}

impl S3Config {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            bucket: s.get("FLOTILLA_S3_BUCKET").map(str::to_owned),
            endpoint: s.url("FLOTILLA_S3_ENDPOINT")?,
            prefix: s.text("FLOTILLA_S3_PREFIX", "").to_owned(),
            url_ttl: Duration::from_secs(match s.positive("FLOTILLA_S3_URL_TTL_S", 3600)? {
                n if n <= 7 * 24 * 3600 => n as u64,
                _ => return Err(ConfigError::new("FLOTILLA_S3_URL_TTL_S", "must be at most 604800 (7 days)")),
            }),
            profile_key: s.get("FLOTILLA_PROFILE_KEY").map(ProfileKey::from_hex).transpose()?,
        })
    }
}

fn parse_screen(raw: &str) -> Result<(u32, u32), ConfigError> {
    let size = raw.trim().split_once('x').and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)));
    match size {
        Some((w, h)) if (64..=8192).contains(&w) && (64..=8192).contains(&h) => Ok((w, h)),
        _ => Err(ConfigError::new("FLOTILLA_MODEL_SCREEN", format!("{raw:?} is not a size like 1024x768 (64 to 8192 each way)"))),
    }
}

fn parse_sandbox_provider(value: Option<&str>) -> Result<Option<SandboxProviderKind>, ConfigError> {
    match value.map(str::trim) {
        None | Some("none") => Ok(None),
        Some("local") => Ok(Some(SandboxProviderKind::Local)),
        Some("e2b") => Ok(Some(SandboxProviderKind::E2b)),
        Some(other) => Err(ConfigError::new("FLOTILLA_SANDBOX_PROVIDER", format!("{other:?} is not one of local, e2b, none"))),
    }
}
