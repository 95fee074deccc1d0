//! Live views of a task's desktop, as the API and the workers share them in
//! Redis: the short-lived tokens a view URL carries, and where the worker
//! that holds a task serves its view.
//!
//! A token is 32 random bytes, hex; Redis keeps only its SHA-256 digest,
//! under a key that expires with the token, so neither a Redis dump nor a
//! log line holds a usable token. A token opens one task in one
//! [`ViewMode`] until it expires; it may open several connections (a page
//! reconnecting) in that time. The API checks it before it bridges a
//! browser to a worker and the worker checks it again before it bridges the
//! connection to the desktop, so neither trusts the other's network.
//!
//! A `control` token is also revocable: it holds the task's control
//! generation of when it was minted, and [`LiveViews::revoke_control`]
//! (called at a release and at a new takeover) moves the generation on, so
//! the token opens nothing more at either end, and the worker closes a
//! control view already open within [`REVOCATION_CHECK`]. `view` tokens
//! are not revoked: watching changes nothing.
//!
//! No URL carries a token. The view page exchanges the token (from its
//! URL's fragment, which no browser sends) for a one-time ticket in a
//! request that carries the token in a header ([`LiveViews::exchange`]);
//! the page's WebSocket URL carries the ticket, which opens one connection
//! within [`TICKET_TTL`] ([`LiveViews::redeem_ticket`]), and the API hands
//! the worker a ticket of its own for the same token ([`LiveViews::pass_on`])
//! in a header. Each hop checks the token's grant again, so an expired or
//! revoked token's tickets open nothing.
//!
//! The worker holding a task writes its view endpoint under the task's
//! route key while the task holds a desktop, and deletes it when the
//! desktop is let go; the key's expiry bounds what a killed worker leaves.

use std::time::Duration;

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::QueueError;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use flotilla_types::ids::{TaskId, TenantId};

/// How long a route outlives the worker that wrote it, at most.
const ROUTE_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long a task's control generation is kept after it last moved: far
/// longer than any token lives (an hour at most), so a token it revoked
/// never finds it back at its old value.
const GENERATION_TTL: Duration = Duration::from_secs(24 * 3600);
/// How often an open control view's generation is checked.
pub const REVOCATION_CHECK: Duration = Duration::from_millis(500);
/// How long a view ticket may wait for its one use (less when its token
/// expires sooner).
pub const TICKET_TTL: Duration = Duration::from_secs(30);
/// The header a view's token travels in when the view page exchanges it
/// for a ticket: never a URL, which request logs and proxies keep.
pub const VIEW_TOKEN_HEADER: &str = "x-flotilla-view-token";
/// The header the API hands the worker a one-time ticket in.
pub const VIEW_TICKET_HEADER: &str = "x-flotilla-view-ticket";

/// What a view lets a person do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ViewMode {
    /// Watch only: input from the viewer never reaches the desktop.
    View,
    /// Watch and use the keyboard and mouse.
    Control,
}

impl ViewMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "view" => Some(Self::View),
            "control" => Some(Self::Control),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::View => "view",
            Self::Control => "control",
        }
    }
}

/// What a token opens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewGrant {
    pub tenant: TenantId,
    pub task: TaskId,
    pub mode: ViewMode,
    /// When the token stops opening the view, epoch ms.
    pub expires_at_ms: i64,
    /// The task's control generation when the token was minted (set by
    /// [`LiveViews::mint`]); a control token opens nothing once it moved on.
    #[serde(default)]
    pub generation: u64,
}

/// A grant reached through a one-time ticket, with the digest of the token
/// behind it (to issue the next hop's ticket).
#[derive(Debug, Clone)]
pub struct Ticketed {
    pub grant: ViewGrant,
    token_digest: String,
}

/// A view token as handed to a person: its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct ViewToken(String);

impl ViewToken {
    /// The token itself, for the URL that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ViewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ViewToken(***)")
    }
}

/// View tokens and view routes in Redis.
#[derive(Clone)]
pub struct LiveViews {
    redis: Redis,
    keys: Keys,
}

impl LiveViews {
    pub fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys }
    }

    /// A new token for `grant`, kept until its expiry, at the task's
    /// current control generation.
    pub async fn mint(&self, grant: &ViewGrant) -> Result<ViewToken, QueueError> {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let token = hex(&bytes);
        let ttl_ms = (grant.expires_at_ms - flotilla_types::clock::now_ms()).max(1);
        let grant = ViewGrant { generation: self.generation(&grant.task).await?, ..grant.clone() };
        let value = serde_json::to_string(&grant).map_err(|e| QueueError::Corrupt(e.to_string()))?;
        let mut conn = self.redis.shared();
        let () = redis::cmd("SET")
            .arg(self.keys.view_token(&digest(&token)))
            .arg(value)
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut conn)
            .await?;
        Ok(ViewToken(token))
    }

    /// What `token` opens, if it is known, not expired and not revoked.
    /// Malformed tokens are unknown ones.
    pub async fn redeem(&self, token: &str) -> Result<Option<ViewGrant>, QueueError> {
        if !well_formed(token) {
            return Ok(None);
        }
        self.redeem_digest(&digest(token)).await
    }

    /// As [`LiveViews::redeem`], for the token whose digest is `token_digest`.
    async fn redeem_digest(&self, token_digest: &str) -> Result<Option<ViewGrant>, QueueError> {
        let mut conn = self.redis.shared();
        let stored: Option<String> = redis::cmd("GET").arg(self.keys.view_token(token_digest)).query_async(&mut conn).await?;
        let Some(stored) = stored else { return Ok(None) };
        let grant: ViewGrant = serde_json::from_str(&stored).map_err(|e| QueueError::Corrupt(e.to_string()))?;
        if grant.expires_at_ms <= flotilla_types::clock::now_ms() || !self.in_force(&grant).await? {
            return Ok(None);
        }
        Ok(Some(grant))
    }

    /// A ticket for `token` if it opens anything now: good for one use
    /// within [`TICKET_TTL`], never after the token expires, and what a URL
    /// carries in place of the token. Redis keeps the ticket's digest and
    /// the token's, never either itself.
    pub async fn exchange(&self, token: &str) -> Result<Option<(String, ViewGrant)>, QueueError> {
        let Some(grant) = self.redeem(token).await? else { return Ok(None) };
        let ticket = self.issue_ticket(&digest(token), &grant).await?;
        Ok(Some((ticket, grant)))
    }

    /// What `ticket` opens, once: the ticket is gone after this call,
    /// whatever it answers. Unknown, used, expired and malformed tickets,
    /// and tickets whose token expired or was revoked since, open nothing.
    pub async fn redeem_ticket(&self, ticket: &str) -> Result<Option<Ticketed>, QueueError> {
        if !well_formed(ticket) {
            return Ok(None);
        }
        let mut conn = self.redis.shared();
        let token_digest: Option<String> =
            redis::cmd("GETDEL").arg(self.keys.view_ticket(&digest(ticket))).query_async(&mut conn).await?;
        let Some(token_digest) = token_digest else { return Ok(None) };
        let grant = self.redeem_digest(&token_digest).await?;
        Ok(grant.map(|grant| Ticketed { grant, token_digest }))
    }

    /// A new one-time ticket for the token `ticketed` came through, for the
    /// next hop (the API's to the worker).
    pub async fn pass_on(&self, ticketed: &Ticketed) -> Result<String, QueueError> {
        self.issue_ticket(&ticketed.token_digest, &ticketed.grant).await
    }

    async fn issue_ticket(&self, token_digest: &str, grant: &ViewGrant) -> Result<String, QueueError> {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let ticket = hex(&bytes);
        let left_ms = (grant.expires_at_ms - flotilla_types::clock::now_ms()).max(1);
        let ttl_ms = left_ms.min(TICKET_TTL.as_millis() as i64);
        let mut conn = self.redis.shared();
        let () = redis::cmd("SET")
            .arg(self.keys.view_ticket(&digest(&ticket)))
            .arg(token_digest)
            .arg("PX")
            .arg(ttl_ms)
            .query_async(&mut conn)
            .await?;
        Ok(ticket)
    }

    /// Whether `grant` still holds: a `view` grant always, a `control` one
    /// while its task's control generation has not moved on.
    pub async fn in_force(&self, grant: &ViewGrant) -> Result<bool, QueueError> {
        Ok(grant.mode == ViewMode::View || self.generation(&grant.task).await? == grant.generation)
    }

    /// Revokes every control token of `task` minted so far.
    pub async fn revoke_control(&self, task: &TaskId) -> Result<(), QueueError> {
        let key = self.keys.view_generation(task);
        let mut conn = self.redis.shared();
        let () = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg(&key)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(GENERATION_TTL.as_millis() as u64)
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// `task`'s control generation: 0 until a first revocation.
    async fn generation(&self, task: &TaskId) -> Result<u64, QueueError> {
        let mut conn = self.redis.shared();
        let value: Option<u64> = redis::cmd("GET").arg(self.keys.view_generation(task)).query_async(&mut conn).await?;
        Ok(value.unwrap_or(0))
    }

    /// Records that `task`'s view is served at `endpoint` (a worker's URL).
    pub async fn set_route(&self, task: &TaskId, endpoint: &str) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let () = redis::cmd("SET")
            .arg(self.keys.view_route(task))
            .arg(endpoint)
            .arg("PX")
            .arg(ROUTE_TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Where `task`'s view is served, while a worker serves it.
    pub async fn route(&self, task: &TaskId) -> Result<Option<String>, QueueError> {
        let mut conn = self.redis.shared();
        Ok(redis::cmd("GET").arg(self.keys.view_route(task)).query_async(&mut conn).await?)
    }

    /// Forgets `task`'s view route.
    pub async fn clear_route(&self, task: &TaskId) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let _: i64 = redis::cmd("DEL").arg(self.keys.view_route(task)).query_async(&mut conn).await?;
        Ok(())
    }
}

/// The SHA-256 of a token, hex.
/// What a token or ticket looks like: 32 bytes, hex.
fn well_formed(secret: &str) -> bool {
    secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit())
}

fn digest(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_the_contract_spells_them() {
        assert_eq!(ViewMode::parse("view"), Some(ViewMode::View));
        assert_eq!(ViewMode::parse("control"), Some(ViewMode::Control));
        assert_eq!(ViewMode::parse("Control"), None);
        assert_eq!(ViewMode::Control.as_str(), "control");
    }

    /// A grant stored before control generations existed reads as
    /// generation 0, the value of a task never revoked.
    #[test]
    fn a_grant_without_a_generation_is_at_the_first() {
        let stored = r#"{"tenant":"acme","task":"tsk_01hzy8m3k2q7x9v4b6n5t0r1ce","mode":"control","expires_at_ms":1}"#;
        let grant: ViewGrant = serde_json::from_str(stored).expect("an older grant");
        assert_eq!((grant.mode, grant.generation), (ViewMode::Control, 0));
    }

    #[test]
    fn tokens_never_print() {
        let token = ViewToken("a".repeat(64));
        assert_eq!(format!("{token:?}"), "ViewToken(***)");
        assert_eq!(digest("abc").len(), 64);
    }
}
