//! Capability routing: what a task needs to run and what a worker can run.
//!
//! A task's [`Route`] is the canonical set of its needs: its pipeline, the
//! sandbox it takes (none, any provider, or a named one), whether it names
//! an existing sandbox by id (`sandbox.id`: it starts none) and the free
//! labels of its `requires`. The queue keeps a lane per (tenant, route,
//! priority), and a worker advertises its [`Capabilities`] with every claim,
//! so it is only ever handed tasks of routes it [`Capabilities::serves`].
//! A route no live worker serves just waits: [`Route::missing`] says for
//! what.
//!
//! A route travels as one string, `<pipeline>|<sandbox>|<label>,<label>`
//! (labels sorted, no `:` anywhere; a task naming its sandbox by id has
//! `+id` after the sandbox part, `openai-cua|any+id|`), because it is part of Redis key names
//! and the scheduler scripts parse it (see `flotilla_queue::queue::fair_scripts`).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::task::{Pipeline, SandboxProviderKind, TaskSpec};

/// The sandbox a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SandboxNeed {
    /// The task runs without a sandbox.
    None,
    /// Any provider's sandbox.
    Any,
    /// This provider's sandbox.
    Of(SandboxProviderKind),
}

impl SandboxNeed {
    fn as_str(self) -> &'static str {
        match self {
            SandboxNeed::None => "none",
            SandboxNeed::Any => "any",
            SandboxNeed::Of(kind) => kind.as_str(),
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "none" => SandboxNeed::None,
            "any" => SandboxNeed::Any,
            "local" => SandboxNeed::Of(SandboxProviderKind::Local),
            "e2b" => SandboxNeed::Of(SandboxProviderKind::E2b),
            _ => return None,
        })
    }
}

/// The mark after a route's sandbox part when the task names its sandbox
/// by id; the scheduler scripts read it too.
const NAMED: &str = "+id";

/// What a task needs of the worker that runs it; see the module doc.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    /// The pipeline the task was given when it entered the queue.
    pub pipeline: Pipeline,
    pub sandbox: SandboxNeed,
    /// The task names an existing sandbox (`sandbox.id`): it runs in that
    /// sandbox and starts none, so it takes no sandbox slot of its own
    /// (a kept sandbox's slot is the kept one, see `flotilla_queue::queue`'s kept
    /// sandboxes).
    pub named: bool,
    pub labels: BTreeSet<String>,
}

impl Route {
    /// The route of a task with this spec. A scripted task of waits alone
    /// needs no sandbox; a replay needs one (its trajectory is read only
    /// when it runs); every other pipeline takes one. `None` for a spec that
    /// names no pipeline: the queue takes only tasks whose pipeline was
    /// decided where they entered it.
    pub fn of(spec: &TaskSpec) -> Option<Self> {
        let pipeline = spec.pipeline?;
        let takes_sandbox = match pipeline {
            Pipeline::Scripted if spec.replay_of.is_none() && spec.actions.is_some() => {
                spec.actions.iter().flatten().any(crate::action::Action::needs_sandbox)
            }
            _ => true,
        };
        let sandbox = match (takes_sandbox, spec.sandbox.as_ref().and_then(|s| s.provider)) {
            (false, _) => SandboxNeed::None,
            (true, Some(kind)) => SandboxNeed::Of(kind),
            (true, None) => SandboxNeed::Any,
        };
        let named = sandbox != SandboxNeed::None && spec.sandbox.as_ref().is_some_and(|s| s.id.is_some());
        let labels = spec.requires.iter().flatten().cloned().collect();
        Some(Self { pipeline, sandbox, named, labels })
    }

    /// The canonical string (see the module doc).
    pub fn key(&self) -> String {
        let pipeline = self.pipeline.as_str();
        let labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        let named = if self.named { NAMED } else { "" };
        format!("{pipeline}|{}{named}|{}", self.sandbox.as_str(), labels.join(","))
    }

    /// Reads a canonical string back.
    pub fn parse(key: &str) -> Option<Self> {
        let mut parts = key.splitn(3, '|');
        let pipeline = parts.next()?.parse::<Pipeline>().ok()?;
        let sandbox_part = parts.next()?;
        let (sandbox_part, named) = match sandbox_part.strip_suffix(NAMED) {
            Some(need) => (need, true),
            None => (sandbox_part, false),
        };
        let sandbox = SandboxNeed::parse(sandbox_part)?;
        let labels = parts.next()?.split(',').filter(|l| !l.is_empty()).map(str::to_owned).collect();
        Some(Self { pipeline, sandbox, named, labels })
    }

    /// Each of the route's needs on its own.
    pub fn needs(&self) -> Vec<Need> {
        let mut needs = vec![Need::Pipeline(self.pipeline)];
        match self.sandbox {
            SandboxNeed::None => {}
            SandboxNeed::Any => needs.push(Need::Sandbox(None)),
            SandboxNeed::Of(kind) => needs.push(Need::Sandbox(Some(kind))),
        }
        needs.extend(self.labels.iter().cloned().map(Need::Label));
        needs
    }

    /// What keeps the route from running on the live workers `fleet`:
    /// nothing when one of them serves it; else the needs no live worker
    /// meets, or, when each is met by some worker but none meets them all,
    /// every need of the route; [`Need::Worker`] when no worker is live.
    pub fn missing(&self, fleet: &[Capabilities]) -> Vec<Need> {
        if fleet.iter().any(|w| w.serves(self)) {
            return Vec::new();
        }
        if fleet.is_empty() {
            return vec![Need::Worker];
        }
        let needs = self.needs();
        let unmet: Vec<Need> = needs.iter().filter(|n| !fleet.iter().any(|w| w.meets(n))).cloned().collect();
        if unmet.is_empty() {
            needs
        } else {
            unmet
        }
    }
}

/// One thing a task may wait for, as `GET /v1/tasks/{id}` and
/// `GET /v1/queues` name it: `worker` (no worker is live), `sandbox` (any
/// provider's), `sandbox:local`, `sandbox:e2b`, `pipeline:<name>`,
/// `label:<label>`; and, not a capability, `max_tokens_per_day` (the
/// task's tenant spent its tokens of today: it waits for the next UTC day).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Need {
    Worker,
    Sandbox(Option<SandboxProviderKind>),
    Pipeline(Pipeline),
    Label(String),
    DayTokens,
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Worker => f.write_str("worker"),
            Need::Sandbox(None) => f.write_str("sandbox"),
            Need::Sandbox(Some(kind)) => write!(f, "sandbox:{}", SandboxNeed::Of(*kind).as_str()),
            Need::Pipeline(p) => write!(f, "pipeline:{}", p.as_str()),
            Need::Label(l) => write!(f, "label:{l}"),
            Need::DayTokens => f.write_str("max_tokens_per_day"),
        }
    }
}

impl Serialize for Need {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What one worker can run: its sandbox provider (or none), its pipelines
/// and its free labels (`FLOTILLA_WORKER_LABELS`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    pub sandbox: Option<SandboxProviderKind>,
    pub pipelines: BTreeSet<Pipeline>,
    pub labels: BTreeSet<String>,
}

impl Capabilities {
    /// Whether this worker can run tasks of `route`.
    pub fn serves(&self, route: &Route) -> bool {
        route.needs().iter().all(|n| self.meets(n))
    }

    fn meets(&self, need: &Need) -> bool {
        match need {
            Need::Worker | Need::DayTokens => true,
            Need::Sandbox(None) => self.sandbox.is_some(),
            Need::Sandbox(Some(kind)) => self.sandbox == Some(*kind),
            Need::Pipeline(p) => self.pipelines.contains(p),
            Need::Label(l) => self.labels.contains(l),
        }
    }

    /// The arguments the claim scripts read: sandbox (`none`, `local`,
    /// `e2b`), pipelines and labels, each list comma-joined.
    pub fn script_args(&self) -> [String; 3] {
        let sandbox = self.sandbox.map_or(SandboxNeed::None, SandboxNeed::Of).as_str().to_owned();
        let pipelines: Vec<&str> = self.pipelines.iter().map(|p| p.as_str()).collect();
        let labels: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        [sandbox, pipelines.join(","), labels.join(",")]
    }

    /// The one-line form the fleet's registry of live workers holds.
    pub fn encode(&self) -> String {
        self.script_args().join("|")
    }

    /// Reads [`Capabilities::encode`] back; unknown parts are left out.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, '|');
        let sandbox = match SandboxNeed::parse(parts.next()?)? {
            SandboxNeed::Of(kind) => Some(kind),
            _ => None,
        };
        let pipelines = parts.next()?.split(',').filter_map(|p| p.parse::<Pipeline>().ok()).collect();
        let labels = parts.next()?.split(',').filter(|l| !l.is_empty()).map(str::to_owned).collect();
        Some(Self { sandbox, pipelines, labels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> TaskSpec {
        TaskSpec::from_json(json.as_bytes()).expect("spec")
    }

    fn worker(sandbox: Option<SandboxProviderKind>, labels: &[&str]) -> Capabilities {
        Capabilities {
            sandbox,
            pipelines: [Pipeline::Scripted, Pipeline::OpenaiCua].into(),
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        }
    }

    #[test]
    fn routes_are_canonical_and_read_back() {
        let waits = spec(r#"{"prompt": "x", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]}"#);
        assert_eq!(Route::of(&waits).expect("routed").key(), "scripted|none|");
        let clicks = spec(
            r#"{"prompt": "x", "pipeline": "scripted", "requires": ["gpu", "eu", "eu"], "actions": [{"type": "click", "x": 1, "y": 1}]}"#,
        );
        let route = Route::of(&clicks).expect("routed");
        assert_eq!(route.key(), "scripted|any|eu,gpu");
        assert_eq!(Route::parse(&route.key()), Some(route));
        let e2b = spec(r#"{"prompt": "x", "pipeline": "openai-cua", "sandbox": {"provider": "e2b"}}"#);
        assert_eq!(Route::of(&e2b).expect("routed").key(), "openai-cua|e2b|");
        let named = spec(r#"{"prompt": "x", "pipeline": "openai-cua", "sandbox": {"id": "local-1"}}"#);
        let route = Route::of(&named).expect("routed");
        assert_eq!(route.key(), "openai-cua|any+id|");
        assert_eq!(Route::parse(&route.key()), Some(route.clone()));
        assert!(worker(Some(SandboxProviderKind::Local), &[]).serves(&route), "a named sandbox needs the same worker");
    }

    #[test]
    fn a_worker_serves_a_route_only_with_every_need() {
        let desktop = Route::parse("scripted|any|").expect("route");
        let eu = Route::parse("scripted|none|eu").expect("route");
        assert!(worker(Some(SandboxProviderKind::Local), &[]).serves(&desktop));
        assert!(!worker(None, &[]).serves(&desktop));
        assert!(!worker(Some(SandboxProviderKind::Local), &[]).serves(&Route::parse("scripted|e2b|").expect("route")));
        assert!(worker(None, &["eu"]).serves(&eu));
        assert!(!worker(None, &["us"]).serves(&eu));
        assert!(!worker(None, &[]).serves(&Route::parse("claude-code|none|").expect("route")));
        assert_eq!(Route::parse("default|none|"), None, "a route always names its pipeline");
    }

    #[test]
    fn a_spec_without_a_pipeline_has_no_route() {
        let unnamed = spec(r#"{"prompt": "x"}"#);
        assert_eq!(Route::of(&unnamed), None);
        assert_eq!(
            Route::of(&unnamed.with_default_pipeline(Pipeline::OpenaiCua)).map(|r| r.key()).as_deref(),
            Some("openai-cua|any|")
        );
    }

    #[test]
    fn missing_names_what_no_live_worker_has() {
        let route = Route::parse("scripted|local|eu").expect("route");
        let fleet = [worker(Some(SandboxProviderKind::Local), &[]), worker(None, &["eu"])];
        let names = |needs: Vec<Need>| needs.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names(route.missing(&fleet)), ["pipeline:scripted", "sandbox:local", "label:eu"], "none has both");
        assert_eq!(names(route.missing(&fleet[..1])), ["label:eu"]);
        assert_eq!(names(route.missing(&[])), ["worker"]);
        assert!(route.missing(&[worker(Some(SandboxProviderKind::Local), &["eu"])]).is_empty());
        let caps = worker(Some(SandboxProviderKind::E2b), &["eu", "gpu"]);
        assert_eq!(Capabilities::decode(&caps.encode()), Some(caps));
    }
}
