//! Where a model-driven conversation looks and acts: the sandbox's whole
//! desktop (the computer-use pipelines), or one Chromium tab inside it (the
//! `browser` pipeline, driven over DevTools by [`crate::browser`]). The
//! step loop in [`computer_use`](super::computer_use) is the same for both;
//! only capturing, acting and the browser's own calls go through here.
//!
//! A tab's screenshots are of its viewport, stored like any other; its
//! screen actions are input events in viewport pixels, each a step with
//! its `action` events; its browser calls are steps too, reported with a
//! `block` event. A call the browser refuses (a page that does not load, a
//! stale reference) is answered to the model as a failed call; a browser
//! that cannot be reached ends the attempt as retryable; a provider that
//! cannot reach a port inside its sandboxes at all ends the task.

use std::time::Instant;

use flotilla_types::action::Action;
use flotilla_types::task::StopCode;

use super::{PipelineError, Session};
use crate::browser::{Browser, BrowserError};
use crate::model::browser::{BrowserCall, PageState};
use crate::sandbox::settle::SETTLE;
use crate::sandbox::Screenshot;

/// What a conversation drives.
pub enum Surface {
    Desktop,
    Browser(Browser),
}

impl Surface {
    /// The browser of the session's sandbox, attached (and started when
    /// the sandbox's template has none).
    pub async fn browser(session: &Session) -> Result<Self, PipelineError> {
        let (provider, id) = session.sandbox()?;
        if !provider.opens_ports() {
            // Every attempt on this worker's provider would fail alike.
            let message = format!(
                "the browser pipeline drives Chromium through a port inside the sandbox, which the {} provider cannot reach; run it on workers with FLOTILLA_SANDBOX_PROVIDER=local",
                provider.name()
            );
            return Err(PipelineError::Fatal { code: StopCode::Problem, message });
        }
        let browser = session.guard(async { Browser::attach(provider.as_ref(), id).await.map_err(broken) }).await?;
        Ok(Self::Browser(browser))
    }

    /// The screen once it has settled after the last action, stored.
    pub async fn capture(&self, session: &Session) -> Result<Screenshot, PipelineError> {
        match self {
            Self::Desktop => session.observe().await,
            Self::Browser(browser) => {
                let shot = session.guard(settled_viewport(browser)).await?;
                session.store_screenshot(&shot).await?;
                Ok(shot)
            }
        }
    }

    /// The size the screen's points are in.
    pub async fn size(&self, session: &Session) -> Result<(u32, u32), PipelineError> {
        match self {
            Self::Desktop => Ok(session.resolution()),
            Self::Browser(browser) => {
                let shot = session.guard(async { browser.screenshot().await.map_err(broken) }).await?;
                Ok((shot.width, shot.height))
            }
        }
    }

    /// Performs one screen action as a step.
    pub async fn act(&mut self, session: &mut Session, action: &Action) -> Result<(), PipelineError> {
        match self {
            Self::Desktop => session.act(action).await,
            Self::Browser(browser) => {
                session.steps_mut().take(action, async { browser.act(action).await.map_err(refused_or_broken) }).await
            }
        }
    }

    /// Carries out a browser call as a step: `Ok(Err(reason))` when the
    /// browser refused it (the model hears why).
    pub async fn browse(&mut self, session: &mut Session, call: &BrowserCall) -> Result<Result<String, String>, PipelineError> {
        let Self::Browser(browser) = self else {
            return Ok(Err(format!("{} needs a browser, and this task drives a desktop", call.kind())));
        };
        let outcome = session
            .steps_mut()
            .take_browser_call(call, async {
                match browser.browse(call).await {
                    Ok(text) => Ok(Ok(text)),
                    Err(BrowserError::Refused(reason)) => Ok(Err(reason)),
                    Err(other) => Err(broken(other)),
                }
            })
            .await?;
        Ok(outcome)
    }

    /// The page on show, for a browser.
    pub async fn page(&self, session: &Session) -> Result<Option<PageState>, PipelineError> {
        match self {
            Self::Desktop => Ok(None),
            Self::Browser(browser) => session.guard(async { browser.state().await.map(Some).map_err(refused_or_broken) }).await,
        }
    }
}

/// The viewport once two captures [`SETTLE`]'s poll time apart match (at
/// least its first wait after the last action), or as it is after its
/// longest wait.
async fn settled_viewport(browser: &Browser) -> Result<Screenshot, PipelineError> {
    let deadline = Instant::now() + SETTLE.max;
    tokio::time::sleep(SETTLE.first).await;
    let mut shot = browser.screenshot().await.map_err(broken)?;
    while Instant::now() < deadline {
        tokio::time::sleep(SETTLE.poll).await;
        let next = browser.screenshot().await.map_err(broken)?;
        let settled = next.png == shot.png;
        shot = next;
        if settled {
            break;
        }
    }
    Ok(shot)
}

fn broken(error: BrowserError) -> PipelineError {
    PipelineError::Retryable(error.to_string())
}

fn refused_or_broken(error: BrowserError) -> PipelineError {
    match error {
        BrowserError::Refused(reason) => PipelineError::Refused(reason),
        other => broken(other),
    }
}
