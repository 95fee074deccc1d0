//! Which sandbox a task runs in, and what becomes of it afterwards.
//!
//! The task's `sandbox` field decides:
//! - no `id`: a new sandbox from the pool (a warm one when its shape
//!   allows), killed when the task ends, unless `keep_alive` is set and the
//!   task ended for good (succeeded, or failed in a way a retry would not
//!   mend): then it is left running and its id stays on the task, so a
//!   later task can name it. An attempt that will be retried, or a
//!   cancelled one, never keeps its sandbox: the retry starts clean.
//! - `id` (and `url`): the user's existing sandbox, found through the
//!   provider by id; it is the user's, so it is never killed here. Providers
//!   find sandboxes by id alone, so `url` is only carried along.
//!
//! Every sandbox a task takes is recorded as its tenant's ([`SandboxOwners`]),
//! until its deadline; an `id` the task's tenant does not own fails exactly
//! as an unknown id does. A sandbox left running after its task holds one of
//! its tenant's `max_sandboxes` slots until its deadline (see
//! `flotilla_queue::queue`'s kept sandboxes), or until it is found gone
//! (its keeper watches it, [`super::kept_watch`]; a task naming it finds it
//! gone). A task that takes it by id starts no sandbox and takes no slot of
//! its own: the kept slot is its slot while it runs (held at least until
//! the task's own deadline), and it leaves the sandbox kept again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_config::{TemplatesConfig, TenantSettings};
use flotilla_types::task::{SandboxProviderKind, SandboxSpec, StopCode};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::error::PipelineError;
use super::handle::TaskHandle;
use super::kept_watch::{self, KeptSandbox};
use crate::sandbox::{Lease, Sandbox, SandboxError, SandboxId, SandboxPool, SandboxProvider, SandboxRequest};

/// What the task's `sandbox` field asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SandboxChoice {
    /// A sandbox started (or taken warm) for this task.
    New { request: SandboxRequest, keep_alive: bool },
    /// The sandbox the task names.
    Existing { id: SandboxId, stretch: Duration },
}

impl SandboxChoice {
    /// The choice the task's `sandbox` field makes, checked against this
    /// worker's provider and the tenant's settings (a template must be
    /// among its `sandbox_templates`). On E2B a template's name becomes
    /// the E2B template id it maps to (`e2b_template`).
    pub(crate) fn of(
        spec: Option<&SandboxSpec>,
        provider: SandboxProviderKind,
        tenant: &TenantSettings,
        templates: &TemplatesConfig,
    ) -> Result<Self, PipelineError> {
        let mut request = SandboxRequest::default();
        let Some(spec) = spec else {
            return Ok(Self::New { request, keep_alive: false });
        };
        check_provider(spec, provider)?;
        if let Some(seconds) = spec.timeout_s {
            request.timeout = Duration::from_secs(seconds);
        }
        if let Some(id) = &spec.id {
            let id = SandboxId::parse(id).map_err(|e| problem(format!("sandbox.id: {e}")))?;
            return Ok(Self::Existing { id, stretch: request.timeout });
        }
        if let Some(template) = spec.template.as_deref().filter(|t| !tenant.allows_template(t)) {
            return Err(problem(format!("sandbox.template: {template:?} is not one of this tenant's sandbox templates")));
        }
        request.template = spec.template.as_deref().map(|name| provider_template(name, provider, templates));
        if let Some([w, h]) = spec.resolution {
            request.resolution = (w, h);
        }
        Ok(Self::New { request, keep_alive: spec.keep_alive.unwrap_or(false) })
    }

    /// How long each extension of the sandbox asks for.
    pub(crate) fn stretch(&self) -> Duration {
        match self {
            Self::New { request, .. } => request.timeout,
            Self::Existing { stretch, .. } => *stretch,
        }
    }
}

/// The template name `provider` is asked for: on E2B the E2B template id
/// a template maps to (`e2b_template`), elsewhere the template's own name.
pub(crate) fn provider_template(name: &str, provider: SandboxProviderKind, templates: &TemplatesConfig) -> String {
    match templates.get(name) {
        Some(template) if provider == SandboxProviderKind::E2b => template.e2b_template_id().to_owned(),
        _ => name.to_owned(),
    }
}

/// The task a sandbox is taken for: its handle records the sandbox as its
/// tenant's, and counts a kept one against the tenant's `max_sandboxes`.
#[derive(Clone, Copy)]
pub(crate) struct Claimant<'a> {
    pub task: &'a Arc<dyn TaskHandle>,
}

impl Claimant<'_> {
    /// Records the tenant as the sandbox's owner until `sandbox.expires_at`;
    /// a failure is logged (the sandbox then answers as unknown to a later
    /// task, which is the safe side).
    async fn own(&self, provider: &str, sandbox: &Sandbox) {
        if let Err(e) = self.task.record_sandbox_owner(provider, &sandbox.id, sandbox.expires_at).await {
            warn!(sandbox = %sandbox.id, error = %e, "could not record the sandbox's owner");
        }
    }

    /// Counts the sandbox, left running after its task, against the
    /// tenant's `max_sandboxes` until its deadline.
    async fn keep(&self, provider: &str, sandbox: &Sandbox) {
        let until_ms = epoch_ms(sandbox.expires_at);
        if let Err(e) = self.task.keep_sandbox(&kept_name(provider, &sandbox.id), until_ms).await {
            warn!(sandbox = %sandbox.id, error = %e, "could not count the kept sandbox against the tenant's max_sandboxes");
        }
    }

    /// The task runs in the sandbox it names, which it may keep alive until
    /// `until`: the sandbox's slot lasts at least that long.
    async fn hold(&self, provider: &str, id: &SandboxId, until: OffsetDateTime) {
        if let Err(e) = self.task.hold_kept_sandbox(&kept_name(provider, id), epoch_ms(until)).await {
            warn!(sandbox = %id, error = %e, "could not hold the kept sandbox's slot for its task");
        }
    }

    /// The sandbox was found gone: no one owns it any more.
    async fn forget_owner(&self, provider: &str, id: &SandboxId) {
        if let Err(e) = self.task.forget_sandbox_owner(provider, id).await {
            warn!(sandbox = %id, error = %e, "could not drop the owner record of a sandbox found gone");
        }
    }

    /// The sandbox was found gone: its slot comes back now.
    async fn forget(&self, provider: &str, id: &SandboxId) {
        if let Err(e) = self.task.forget_kept_sandbox(&kept_name(provider, id)).await {
            warn!(sandbox = %id, error = %e, "could not give back the slot of a kept sandbox found gone");
        }
    }
}

fn epoch_ms(at: OffsetDateTime) -> i64 {
    (at.unix_timestamp_nanos() / 1_000_000) as i64
}

/// A kept sandbox as the scheduler names it: `<provider>:<id>`.
fn kept_name(provider: &str, id: &SandboxId) -> String {
    format!("{provider}:{id}")
}

/// The sandbox a session acts on.
pub(crate) enum Held {
    /// Taken from the pool for this task.
    Leased { lease: Lease, keep_alive: bool },
    /// The user's own sandbox, found by id.
    Existing { sandbox: Sandbox, waited: Duration },
}

impl Held {
    /// Gets the sandbox `choice` asks for; waits for the pool (and the fleet
    /// cap) unless `cancel` fires. `runs_until` is the latest the task may
    /// keep a sandbox alive.
    pub(crate) async fn take(
        pool: &SandboxPool,
        choice: &SandboxChoice,
        claimant: Claimant<'_>,
        cancel: &CancellationToken,
        runs_until: OffsetDateTime,
    ) -> Result<Self, PipelineError> {
        let provider = pool.provider().name();
        match choice {
            SandboxChoice::New { request, keep_alive } => {
                let lease = pool.acquire(request, cancel).await.map_err(PipelineError::from)?;
                claimant.own(provider, &lease.sandbox).await;
                Ok(Self::Leased { lease, keep_alive: *keep_alive })
            }
            SandboxChoice::Existing { id, .. } => {
                let began = Instant::now();
                if !claimant.task.owns_sandbox(provider, id).await? {
                    return Err(existing_failure(id, SandboxError::NotFound(id.clone())));
                }
                let sandbox = match pool.provider().connect(id).await {
                    Ok(sandbox) => sandbox,
                    Err(e) => {
                        if matches!(e, SandboxError::NotFound(_) | SandboxError::Expired(_)) {
                            claimant.forget(provider, id).await;
                        }
                        return Err(existing_failure(id, e));
                    }
                };
                // The kept slot is the task's slot while it runs.
                claimant.hold(provider, id, runs_until.max(sandbox.expires_at)).await;
                Ok(Self::Existing { sandbox, waited: began.elapsed() })
            }
        }
    }

    /// Takes up the sandbox `id` an interrupted attempt of the same task
    /// left running, as this attempt's own (settled like a new one);
    /// `None` when it is gone or not the tenant's.
    pub(crate) async fn adopt(
        pool: &SandboxPool,
        (host, id): (Option<&str>, &SandboxId),
        keep_alive: bool,
        claimant: Claimant<'_>,
        cancel: &CancellationToken,
    ) -> Result<Option<Self>, PipelineError> {
        let provider = pool.provider().name();
        if !claimant.task.owns_sandbox(provider, id).await? {
            return Ok(None);
        }
        match pool.adopt(host, id, cancel).await {
            Ok(lease) => Ok(Some(Self::Leased { lease, keep_alive })),
            Err(SandboxError::NotFound(_) | SandboxError::Expired(_)) => {
                claimant.forget_owner(provider, id).await;
                Ok(None)
            }
            Err(other) => Err(PipelineError::from(other)),
        }
    }

    pub(crate) fn sandbox(&self) -> &Sandbox {
        match self {
            Self::Leased { lease, .. } => &lease.sandbox,
            Self::Existing { sandbox, .. } => sandbox,
        }
    }

    /// Taken ready from the pool.
    pub(crate) fn warm(&self) -> bool {
        matches!(self, Self::Leased { lease, .. } if lease.warm)
    }

    /// How long getting the sandbox took.
    pub(crate) fn waited(&self) -> Duration {
        match self {
            Self::Leased { lease, .. } => lease.waited,
            Self::Existing { waited, .. } => *waited,
        }
    }

    /// Settles the sandbox once the attempt ended with `outcome`: kills a
    /// leased one, or leaves it running for a later task when it was asked
    /// to be kept and the task ended for good, or for the next attempt when
    /// that one takes the task up here from its journal (`carried_over`,
    /// see [`Session::carries_over`](super::Session::carries_over)), paused
    /// for any worker when the task parked waiting for a person; a run
    /// without a journal starts over, so its sandbox goes. `expires_at` is
    /// its deadline as last extended.
    /// The owner's record follows: kept or the user's own, it lasts until
    /// the deadline as extended; released, it is dropped. A named sandbox
    /// its keeper found `gone` is no longer counted as kept.
    pub(crate) async fn settle<T>(
        self,
        pool: &SandboxPool,
        outcome: &Result<T, PipelineError>,
        expires_at: Option<time::OffsetDateTime>,
        gone: bool,
        carried_over: bool,
        claimant: Claimant<'_>,
    ) {
        let provider = pool.provider().name();
        match self {
            // Parked with its task, paused: any worker resumes it.
            Self::Leased { lease, .. } if matches!(outcome, Err(PipelineError::Parked)) => pool.let_go_paused(lease).await,
            // Waiting for its tenant's next day: paused meanwhile, and the
            // attempt of that day resumes it; one that cannot be paused ends.
            Self::Leased { lease, .. } if carried_over && matches!(outcome, Err(PipelineError::DayTokensSpent { .. })) => {
                match pool.provider().pause(&lease.sandbox.id).await {
                    Ok(true) => pool.let_go_paused(lease).await,
                    paused => {
                        warn!(sandbox = %lease.sandbox.id, ?paused, "could not pause the sandbox of a task waiting for its next day");
                        pool.release(lease).await;
                    }
                }
            }
            // Handed back, taken over or retried mid-run: the attempt that
            // takes the task up next continues in this sandbox (its owner
            // record stays until the deadline).
            Self::Leased { lease, .. } if carried_over => pool.keep(lease).await,
            Self::Leased { mut lease, keep_alive: true } if ends_for_good(outcome) => {
                if let Some(at) = expires_at {
                    lease.sandbox.expires_at = at;
                }
                claimant.own(provider, &lease.sandbox).await;
                claimant.keep(provider, &lease.sandbox).await;
                kept_watch::spawn(KeptSandbox {
                    provider: Arc::clone(pool.provider()),
                    task: Arc::clone(claimant.task),
                    name: kept_name(provider, &lease.sandbox.id),
                    id: lease.sandbox.id.clone(),
                    until: lease.sandbox.expires_at,
                });
                pool.keep(lease).await;
            }
            Self::Leased { lease, .. } => {
                if let Err(e) = claimant.task.forget_sandbox_owner(provider, &lease.sandbox.id).await {
                    warn!(sandbox = %lease.sandbox.id, error = %e, "could not drop the sandbox's owner record");
                }
                pool.release(lease).await;
            }
            Self::Existing { sandbox, .. } if gone => claimant.forget(provider, &sandbox.id).await,
            Self::Existing { mut sandbox, .. } => {
                if let Some(at) = expires_at {
                    sandbox.expires_at = at;
                    claimant.own(provider, &sandbox).await;
                }
                claimant.keep(provider, &sandbox).await;
            }
        }
    }

    /// Gives a leased sandbox back in the background, for a session
    /// dropped mid-step; the user's own sandbox is left alone.
    pub(crate) fn release_in_background(self, pool: &SandboxPool) {
        let Self::Leased { lease, .. } = self else { return };
        let pool = pool.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { pool.release(lease).await });
        }
    }

    /// Whether the sandbox was taken from the pool for this task.
    pub(crate) fn is_leased(&self) -> bool {
        matches!(self, Self::Leased { .. })
    }

    pub(crate) fn provider_and_id<'a>(&'a self, pool: &'a SandboxPool) -> (&'a Arc<dyn SandboxProvider>, &'a SandboxId) {
        (pool.provider(), &self.sandbox().id)
    }
}

/// Whether the task ends with this attempt: a retry or a cancel does not
/// count, so neither keeps a sandbox.
fn ends_for_good<T>(outcome: &Result<T, PipelineError>) -> bool {
    matches!(outcome, Ok(_) | Err(PipelineError::Fatal { .. } | PipelineError::Refused(_)))
}

fn check_provider(spec: &SandboxSpec, provider: SandboxProviderKind) -> Result<(), PipelineError> {
    match spec.provider {
        Some(wanted) if wanted != provider => Err(problem(format!(
            "the task asks for a {} sandbox and this worker provides {}",
            wanted.as_str(),
            provider.as_str()
        ))),
        _ => Ok(()),
    }
}

/// A named sandbox that cannot be reached will not appear by retrying.
fn existing_failure(id: &SandboxId, error: SandboxError) -> PipelineError {
    match error {
        SandboxError::NotFound(_) | SandboxError::Expired(_) => {
            problem(format!("the sandbox {id} named by sandbox.id does not exist or has ended"))
        }
        other => PipelineError::from(other),
    }
}

fn problem(message: String) -> PipelineError {
    PipelineError::Fatal { code: StopCode::Problem, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> SandboxSpec {
        serde_json::from_value(json).expect("spec")
    }

    #[test]
    fn no_sandbox_field_asks_for_a_default_sandbox() {
        let choice = SandboxChoice::of(None, SandboxProviderKind::Local, &TenantSettings::default(), &TemplatesConfig::default())
            .expect("choice");
        assert_eq!(choice, SandboxChoice::New { request: SandboxRequest::default(), keep_alive: false });
    }

    #[test]
    fn an_id_names_an_existing_sandbox() {
        let choice = SandboxChoice::of(
            Some(&spec(serde_json::json!({"id": "local-1", "timeout_s": 60}))),
            SandboxProviderKind::Local,
            &TenantSettings::default(),
            &TemplatesConfig::default(),
        )
        .expect("choice");
        let id = SandboxId::parse("local-1").expect("id");
        assert_eq!(choice, SandboxChoice::Existing { id, stretch: Duration::from_secs(60) });
    }

    #[test]
    fn keep_alive_and_the_shape_are_read() {
        let spec = spec(serde_json::json!({"resolution": [800, 600], "keep_alive": true}));
        let SandboxChoice::New { request, keep_alive } =
            SandboxChoice::of(Some(&spec), SandboxProviderKind::Local, &TenantSettings::default(), &TemplatesConfig::default())
                .expect("choice")
        else {
            panic!("a new sandbox");
        };
        assert!(keep_alive);
        assert_eq!(request.resolution, (800, 600));
    }

    #[test]
    fn a_bad_id_or_another_provider_is_a_problem() {
        for (json, provider) in [
            (serde_json::json!({"id": "../x"}), SandboxProviderKind::Local),
            (serde_json::json!({"provider": "e2b"}), SandboxProviderKind::Local),
        ] {
            let result = SandboxChoice::of(Some(&spec(json)), provider, &TenantSettings::default(), &TemplatesConfig::default());
            assert!(matches!(result, Err(PipelineError::Fatal { code: StopCode::Problem, .. })), "{result:?}");
        }
    }

    #[test]
    fn a_template_must_be_among_the_tenants() {
        let spec = spec(serde_json::json!({"template": "desktop-chrome"}));
        let refused =
            SandboxChoice::of(Some(&spec), SandboxProviderKind::Local, &TenantSettings::default(), &TemplatesConfig::default());
        assert!(
            matches!(&refused, Err(PipelineError::Fatal { code: StopCode::Problem, message }) if message.contains("sandbox.template")),
            "{refused:?}"
        );
        let allowed = TenantSettings { sandbox_templates: vec!["desktop-chrome".into()], ..TenantSettings::default() };
        let SandboxChoice::New { request, .. } =
            SandboxChoice::of(Some(&spec), SandboxProviderKind::Local, &allowed, &TemplatesConfig::default()).expect("choice")
        else {
            panic!("a new sandbox");
        };
        assert_eq!(request.template.as_deref(), Some("desktop-chrome"));
    }

    #[test]
    fn on_e2b_a_template_becomes_the_e2b_template_id_it_maps_to() {
        let mut browser = TemplatesConfig::default().get("browser").cloned().expect("browser");
        browser.e2b_template = Some("tpl-0123".into());
        let templates = TemplatesConfig::with([browser]);
        let allowed = TenantSettings { sandbox_templates: vec!["browser".into(), "office".into()], ..TenantSettings::default() };
        let template_of = |provider, name: &str| {
            let spec = spec(serde_json::json!({"provider": provider, "template": name}));
            match SandboxChoice::of(Some(&spec), provider_kind(provider), &allowed, &templates).expect("choice") {
                SandboxChoice::New { request, .. } => request.template,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(template_of("e2b", "browser").as_deref(), Some("tpl-0123"));
        assert_eq!(template_of("e2b", "office").as_deref(), Some("office"), "unmapped: the name itself");
        assert_eq!(template_of("local", "browser").as_deref(), Some("browser"), "local desktops take the name");
    }

    fn provider_kind(name: &str) -> SandboxProviderKind {
        match name {
            "e2b" => SandboxProviderKind::E2b,
            _ => SandboxProviderKind::Local,
        }
    }

    #[test]
    fn only_an_attempt_that_ends_the_task_keeps_its_sandbox() {
        assert!(ends_for_good::<()>(&Ok(())));
        assert!(ends_for_good::<()>(&Err(PipelineError::Fatal { code: StopCode::Problem, message: String::new() })));
        assert!(!ends_for_good::<()>(&Err(PipelineError::Retryable(String::new()))));
        assert!(!ends_for_good::<()>(&Err(PipelineError::Cancelled)));
    }
}
