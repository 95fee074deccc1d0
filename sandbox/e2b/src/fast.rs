//! Flotilla's desktop extension of envd, for what a worker does on every
//! step: a capture in one call, settled where the display's changes are
//! seen (X DAMAGE), and input sent straight to the display (XTEST) with no
//! process started per action. A Flotilla sandbox host serves it on the
//! same envd address, behind the same access token; hosted E2B does not, so
//! the provider asks once per host: a `404` on the extension's path means
//! the standard calls (`scrot` and a file read, `xdotool`) from then on.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use flotilla_sandbox::{SandboxError, Settle};
use flotilla_types::action::Action;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::envd::{Envd, EnvdError, EnvdTarget};

/// A capture of the screen: the body is the PNG.
pub const CAPTURE_PATH: &str = "/flotilla.Desktop/Capture";
/// One action on the screen; answered `204` once the display applied it.
pub const ACT_PATH: &str = "/flotilla.Desktop/Act";
/// How long a settled capture waited for the screen, in milliseconds.
pub const WAITED_HEADER: &str = "flotilla-waited-ms";

/// What a capture asks: with a settle, the host waits for the screen to
/// settle by it first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRequest {
    #[serde(default)]
    pub settle: Option<Settle>,
}

/// Why the host refused or failed a call: `code` names the kind of
/// [`SandboxError`] so the worker sees the same error as in-process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: String,
    pub message: String,
}

impl Refusal {
    /// The refusal for `error`, with its HTTP status.
    pub fn of(error: &SandboxError) -> (u16, Self) {
        let (status, code) = match error {
            SandboxError::InvalidAction(_) => (400, "invalid_action"),
            SandboxError::InvalidRequest(_) => (400, "invalid_request"),
            SandboxError::Display(_) => (500, "display"),
            SandboxError::Timeout(_) => (504, "timeout"),
            _ => (500, "unavailable"),
        };
        let message = match error {
            SandboxError::InvalidAction(m) | SandboxError::InvalidRequest(m) | SandboxError::Display(m) => m.clone(),
            other => other.to_string(),
        };
        (status, Self { code: code.to_owned(), message })
    }

    /// The error this refusal stands for.
    pub fn into_error(self) -> SandboxError {
        match self.code.as_str() {
            "invalid_action" => SandboxError::InvalidAction(self.message),
            "invalid_request" => SandboxError::InvalidRequest(self.message),
            "display" => SandboxError::Display(self.message),
            _ => SandboxError::Unavailable(self.message),
        }
    }
}

/// Whether a host serves the extension, learned from its first answer
/// (0 until then).
#[derive(Debug, Default)]
pub(crate) struct Support(AtomicU8);

const SERVED: u8 = 1;
const ABSENT: u8 = 2;

impl Support {
    /// Whether the extension may be tried: served, or not known yet.
    pub fn worth_trying(&self) -> bool {
        self.0.load(Ordering::Relaxed) != ABSENT
    }

    fn learn(&self, served: bool) {
        self.0.store(if served { SERVED } else { ABSENT }, Ordering::Relaxed);
    }
}

/// What an extension call came to: done, refused by the host in
/// [`SandboxError`]'s terms, or not served here.
pub(crate) enum Answer<T> {
    Done(T),
    Refused(SandboxError),
    NotServed,
}

impl Envd {
    /// A capture through the extension: the PNG and how long the host
    /// waited for the screen to settle.
    pub(crate) async fn fast_capture(
        &self,
        support: &Support,
        target: &EnvdTarget,
        settle: Option<Settle>,
    ) -> Result<Answer<(Vec<u8>, Duration)>, EnvdError> {
        let request = self.post(target, CAPTURE_PATH)?.json(&CaptureRequest { settle });
        let response = request.send().await.map_err(|e| EnvdError::Unavailable(e.to_string()))?;
        let waited = response
            .headers()
            .get(WAITED_HEADER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or_default();
        match answer(support, response).await? {
            Answer::Done(response) => {
                let png = response.bytes().await.map_err(|e| EnvdError::Unavailable(e.to_string()))?;
                Ok(Answer::Done((png.to_vec(), waited)))
            }
            Answer::Refused(error) => Ok(Answer::Refused(error)),
            Answer::NotServed => Ok(Answer::NotServed),
        }
    }

    /// One action through the extension.
    pub(crate) async fn fast_act(
        &self,
        support: &Support,
        target: &EnvdTarget,
        action: &Action,
    ) -> Result<Answer<()>, EnvdError> {
        let request = self.post(target, ACT_PATH)?.json(action);
        let response = request.send().await.map_err(|e| EnvdError::Unavailable(e.to_string()))?;
        Ok(match answer(support, response).await? {
            Answer::Done(_) => Answer::Done(()),
            Answer::Refused(error) => Answer::Refused(error),
            Answer::NotServed => Answer::NotServed,
        })
    }
}

/// Reads an extension call's status: a `404` means the host does not
/// serve it (remembered), a refusal's body its error; the edge's and
/// envd's own errors (a gone sandbox, a bad token) stay envd errors.
async fn answer(support: &Support, response: reqwest::Response) -> Result<Answer<reqwest::Response>, EnvdError> {
    let status = response.status();
    if status == StatusCode::NOT_FOUND {
        support.learn(false);
        return Ok(Answer::NotServed);
    }
    if status.is_success() {
        support.learn(true);
        return Ok(Answer::Done(response));
    }
    if matches!(status, StatusCode::BAD_GATEWAY | StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Err(super::envd::status_error(response).await);
    }
    let text = response.text().await.unwrap_or_default();
    match serde_json::from_str::<Refusal>(&text) {
        Ok(refusal) => Ok(Answer::Refused(refusal.into_error())),
        Err(_) => Err(EnvdError::Unavailable(format!("{status}: {}", text.chars().take(200).collect::<String>()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_carry_the_kind_of_error_across() {
        for error in [
            SandboxError::InvalidAction("x past the screen".into()),
            SandboxError::InvalidRequest("bad".into()),
            SandboxError::Display("the X server went away".into()),
        ] {
            let (status, refusal) = Refusal::of(&error);
            assert!(status >= 400 && status != 404, "never the status that means no extension");
            let back = serde_json::from_value::<Refusal>(serde_json::to_value(&refusal).expect("json")).expect("back");
            assert_eq!(back.into_error().to_string(), error.to_string());
        }
    }

    #[test]
    fn support_is_learned_once_and_a_missing_extension_is_not_tried_again() {
        let support = Support::default();
        assert!(support.worth_trying(), "unknown: worth a try");
        support.learn(true);
        assert!(support.worth_trying());
        support.learn(false);
        assert!(!support.worth_trying());
    }
}
