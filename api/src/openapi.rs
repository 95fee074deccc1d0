//! The OpenAPI document, generated from the handlers' annotations and the
//! shared model's schemas, so it cannot drift from the code; the request
//! rules the derived schemas cannot carry are laid over it by
//! [`request_rules`], for the server's default pipeline.

mod request_rules;

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use axum::extract::State;

use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use flotilla_queue::schedule;
use flotilla_types::task::Pipeline;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, Schema};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorDetail};
use crate::routes::{
    batch_events, batch_report, batches, events, feed_events, mcp, ops, profiles, queues, schedules, takeover, tasks, usage,
    views, webhook_listen, webhooks,
};
use crate::state::AppState;
use crate::{auth, dashboard};

/// The API's document, served at `/openapi.json`.
#[derive(OpenApi)]
#[openapi(
    info(title = "Flotilla", description = "Job queue for computer-use agents: submit tasks, follow their progress, operate the queue."),
    paths(
        tasks::submit,
        tasks::list,
        tasks::get,
        tasks::cancel,
        tasks::input,
        takeover::takeover,
        takeover::release,
        views::view,
        views::ticket,
        events::stream,
        feed_events::stream,
        batches::create,
        batches::get,
        batches::cancel,
        batch_report::report,
        batch_events::stream,
        schedules::create,
        schedules::list,
        schedules::get,
        schedules::patch,
        schedules::delete,
        usage::usage,
        webhooks::create,
        webhooks::list,
        webhooks::get,
        webhooks::patch,
        webhooks::delete,
        webhooks::rotate,
        webhooks::deliveries,
        webhooks::retry,
        webhook_listen::listen,
        profiles::list,
        profiles::delete,
        queues::stats,
        queues::dead,
        queues::retry,
        ops::healthz,
        ops::readyz,
        ops::metrics,
        document,
        dashboard::page,
        mcp::with_caller_key,
        dashboard::evals::page,
    ),
    components(schemas(
        ErrorBody,
        ErrorDetail,
        crate::routes::sse::SseFrame,
        flotilla_types::TaskId,
        flotilla_types::BatchId,
        flotilla_types::ScheduleId,
        flotilla_types::WebhookId,
        flotilla_types::MessageId,
        flotilla_types::task::TaskSpec,
        flotilla_queue::queue::TaskRecord,
        flotilla_types::event::Event,
        flotilla_types::event::EventKind,
        flotilla_types::action::Action,
        flotilla_queue::queue::QueueStats,
        flotilla_queue::queue::LaneStats,
        flotilla_queue::queue::TenantLoad,
        tasks::TaskAccepted,
        tasks::TaskPage,
        tasks::Cancelled,
        tasks::InputAccepted,
        views::ViewLink,
        views::ViewTicket,
        takeover::TakenOver,
        takeover::Release,
        takeover::Released,
        flotilla_queue::live::ViewMode,
        flotilla_types::task::HumanInput,
        flotilla_types::task::Decision,
        queues::DeadTasks,
        queues::Requeued,
        batches::BatchRequest,
        batches::BatchAccepted,
        batches::BatchView,
        batches::BatchCancelled,
        flotilla_queue::queue::BatchCounts,
        flotilla_types::eval::TaskSetup,
        flotilla_types::eval::TaskCheck,
        flotilla_types::eval::Verdict,
        flotilla_types::eval::CheckStage,
        flotilla_types::eval_plan::Matrix,
        flotilla_types::eval_report::BatchReport,
        flotilla_types::eval_report::CellReport,
        flotilla_types::eval_report::Spend,
        flotilla_types::eval_report::TaskReport,
        flotilla_types::eval_report::TaskCell,
        flotilla_types::eval_report::RunView,
        flotilla_queue::schedule::NewSchedule,
        flotilla_queue::schedule::SchedulePatch,
        flotilla_queue::schedule::Schedule,
        flotilla_queue::schedule::Overlap,
        schedules::ScheduleList,
        flotilla_types::task::Budget,
        flotilla_types::usage::UsageView,
        flotilla_types::usage::ModelTokens,
        usage::UsageReport,
        usage::UsageDay,
        usage::UsageLimits,
        usage::RateLimit,
        flotilla_queue::webhooks::NewEndpoint,
        flotilla_queue::webhooks::EndpointPatch,
        flotilla_queue::webhooks::Endpoint,
        flotilla_queue::webhooks::EventType,
        flotilla_queue::webhooks::Delivery,
        flotilla_queue::webhooks::DeliveryStatus,
        webhooks::EndpointCreated,
        webhooks::EndpointPage,
        webhooks::DeliveryPage,
        webhooks::SecretRotated,
        profiles::Profile,
        profiles::ProfileList,
    )),
    modifiers(&BearerAuth, &ScheduleRules, &ReadKeys),
    tags(
        (name = "tasks", description = "Submit, read, list, cancel and follow tasks"),
        (name = "batches", description = "Submit many tasks at once; count, follow and cancel them together"),
        (name = "schedules", description = "Cron rules that enqueue a task at each due time"),
        (name = "usage", description = "What the caller's tenant used per day, and its limits"),
        (name = "webhooks", description = "Signed callbacks (Standard Webhooks) for task and batch outcomes, with a delivery log"),
        (name = "profiles", description = "Saved browser profiles: listed and deleted (tasks load and save them with `sandbox.profile`)"),
        (name = "queues", description = "Queue figures and the dead-letter list"),
        (name = "operations", description = "Health, readiness, metrics, this document, the dashboard page"),
        (name = "mcp", description = "The Model Context Protocol server over streamable HTTP, for MCP clients"),
    )
)]
pub struct ApiDoc;

/// Declares the `bearer` security scheme the paths refer to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key (flt_…); a read key may only GET"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "admin",
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some("The admin key (FLOTILLA_ADMIN_KEY)")).build(),
            ),
        );
    }
}

/// Documents the `403 forbidden` a read key (`scope = "read"`) gets on
/// every call but a `GET`, on each operation that takes a tenant key.
struct ReadKeys;

impl Modify for ReadKeys {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        // A read key may use /mcp: its tools' writes are refused by the routes they call.
        let operations = openapi.paths.paths.iter_mut().filter(|(path, _)| path.as_str() != crate::routes::mcp::PATH);
        for (_, item) in operations {
            let writes = [&mut item.post, &mut item.put, &mut item.patch, &mut item.delete];
            for operation in writes.into_iter().flatten() {
                let tenant_key = operation.security.as_ref().is_some_and(|s| !s.is_empty());
                if tenant_key && !operation.responses.responses.contains_key("403") {
                    let forbidden = ResponseBuilder::new()
                        .description("A read key (`scope = \"read\"`) may only `GET` (`forbidden`)")
                        .content(
                            "application/json",
                            ContentBuilder::new().schema(Some(RefOr::Ref(Ref::from_schema_name("ErrorBody")))).build(),
                        )
                        .build();
                    operation.responses.responses.insert("403".to_owned(), RefOr::T(forbidden));
                }
            }
        }
    }
}

/// States what a schedule's `cron` and `timezone` may be: the pattern and
/// the zone names the parser accepts, known only at run time (the zone
/// database) or kept beside the parser (the pattern).
struct ScheduleRules;

impl Modify for ScheduleRules {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(components) = openapi.components.as_mut() else { return };
        let zones: Vec<serde_json::Value> = schedule::zone_names().into_iter().map(serde_json::Value::from).collect();
        for name in ["NewSchedule", "SchedulePatch"] {
            let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(name) else { continue };
            if let Some(RefOr::T(Schema::Object(cron))) = object.properties.get_mut("cron") {
                cron.pattern = Some(schedule::CRON_PATTERN.to_owned());
            }
            if let Some(RefOr::T(Schema::Object(zone))) = object.properties.get_mut("timezone") {
                zone.enum_values = Some(zones.clone());
            }
        }
    }
}

/// The document for a server whose default pipeline is `default`: the
/// derived schemas with the request rules laid over them.
pub fn document_for(default: Pipeline, templates: Option<&[String]>) -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    request_rules::apply(&mut doc, default, templates);
    doc
}

/// The document, rendered once per default pipeline and set of templates.
type Rendered = BTreeMap<(Pipeline, Option<Vec<String>>), Arc<str>>;
static DOCUMENTS: LazyLock<Mutex<Rendered>> = LazyLock::new(Mutex::default);

/// This API's OpenAPI 3.1 document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "OpenAPI document", body = Object, content_type = "application/json"))
)]
pub async fn document(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let default = state.config().api.default_pipeline;
    let templates = caller_templates(&state, &headers);
    let rendered = {
        let mut documents = DOCUMENTS.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = documents.entry((default, templates));
        let templates = entry.key().1.clone();
        Arc::clone(entry.or_insert_with(|| Arc::from(document_for(default, templates.as_deref()).to_string())))
    };
    ([(CONTENT_TYPE, "application/json")], rendered.to_string())
}

/// The sandbox templates the caller may name: its tenant's, when the
/// request carries a key; with no key (or an unknown one), none when no
/// tenant has any, else not known (`None`). A tenant never sees another's.
fn caller_templates(state: &AppState, headers: &HeaderMap) -> Option<Vec<String>> {
    match auth::tenant_of(state, headers) {
        Some(tenant) => Some(state.config().tenants.get(&tenant).sandbox_templates.clone()),
        None if state.config().tenants.iter().all(|(_, settings)| settings.sandbox_templates.is_empty()) => Some(Vec::new()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> serde_json::Value {
        document_for(Pipeline::OpenaiCua, Some(&[]))
    }

    #[test]
    fn every_route_is_documented() {
        let doc = document();
        let paths = doc["paths"].as_object().expect("paths");
        for (path, method) in [
            ("/v1/tasks", "post"),
            ("/v1/tasks", "get"),
            ("/v1/tasks/{id}", "get"),
            ("/v1/tasks/{id}/cancel", "post"),
            ("/v1/tasks/{id}/events", "get"),
            ("/v1/batches", "post"),
            ("/v1/batches/{id}", "get"),
            ("/v1/batches/{id}/cancel", "post"),
            ("/v1/batches/{id}/events", "get"),
            ("/v1/schedules", "post"),
            ("/v1/schedules", "get"),
            ("/v1/schedules/{id}", "get"),
            ("/v1/schedules/{id}", "patch"),
            ("/v1/schedules/{id}", "delete"),
            ("/v1/queues", "get"),
            ("/v1/dead", "get"),
            ("/v1/dead/{id}/retry", "post"),
            ("/healthz", "get"),
            ("/readyz", "get"),
            ("/metrics", "get"),
            ("/openapi.json", "get"),
            ("/", "get"),
            ("/mcp", "post"),
        ] {
            assert!(paths.get(path).and_then(|p| p.get(method)).is_some(), "{method} {path} is missing");
        }
        // A WebSocket upgrade is no operation the document can state; view
        // URLs (`GET /v1/tasks/{id}/view`) carry its address.
        assert!(paths.get("/v1/tasks/{id}/view/socket").is_none(), "the view socket is left out of the document");
    }

    #[test]
    fn the_model_and_the_security_scheme_are_included() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        for name in ["TaskSpec", "TaskRecord", "Event", "QueueStats", "ErrorBody", "Action", "BatchView", "Schedule"] {
            assert!(schemas.contains_key(name), "schema {name} is missing");
        }
        assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        assert!(doc["paths"]["/v1/tasks"]["post"]["security"].is_array());
        assert!(doc["paths"]["/healthz"]["get"]["security"].is_null());
        assert!(doc["paths"]["/"]["get"]["security"].is_null(), "the page itself needs no key");
    }

    /// The schema `schema` names, following one `$ref`.
    fn resolve<'a>(doc: &'a serde_json::Value, schema: &'a serde_json::Value) -> &'a serde_json::Value {
        match schema["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")) {
            Some(name) => &doc["components"]["schemas"][name],
            None => schema,
        }
    }

    /// Every `GET` whose answer holds a list takes `limit` (1 to 500) and a
    /// `cursor` with the form its `next_cursor` has, and answers `next_cursor`.
    #[test]
    fn every_list_pages() {
        let doc = document();
        let mut lists = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            let Some(get) = item.get("get") else { continue };
            let body = resolve(&doc, &get["responses"]["200"]["content"]["application/json"]["schema"]);
            let Some(properties) = body["properties"].as_object() else { continue };
            // A collection is a path not ending in an id; the queue's figures
            // hold one entry per lane, usage one per day of its bounded
            // range and a batch's report one per model and per suite task
            // of its batch (at most 10 000 runs): reports, not lists.
            let collection = !path.ends_with('}') && path != "/v1/queues" && path != "/v1/usage" && !path.ends_with("/report");
            if !collection || !properties.values().any(|p| p["type"] == "array") {
                continue;
            }
            lists.push(path.as_str());
            assert!(properties.contains_key("next_cursor"), "{path} answers no next_cursor");
            let params = get["parameters"].as_array().expect("parameters");
            let param = |name: &str| params.iter().find(|p| p["name"] == name && p["in"] == "query");
            let limit = param("limit").unwrap_or_else(|| panic!("{path} takes no limit"));
            assert_eq!(
                (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
                (&serde_json::json!(1), &serde_json::json!(500)),
                "{path}"
            );
            let cursor = resolve(&doc, &param("cursor").unwrap_or_else(|| panic!("{path} takes no cursor"))["schema"]);
            let typed = cursor["pattern"].is_string()
                || cursor["oneOf"].as_array().is_some_and(|o| o.iter().any(|s| resolve(&doc, s)["pattern"].is_string()));
            assert!(typed, "{path}: the cursor states its form: {cursor}");
        }
        lists.sort_unstable();
        assert_eq!(
            lists,
            ["/v1/dead", "/v1/profiles", "/v1/schedules", "/v1/tasks", "/v1/webhooks", "/v1/webhooks/{id}/deliveries"]
        );
    }

    #[test]
    fn every_call_a_read_key_may_not_make_documents_its_403() {
        let doc = document();
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("item") {
                // A read key may use /mcp; the routes its tools call refuse its writes.
                if path == crate::routes::mcp::PATH {
                    assert!(operation["responses"]["403"].is_null(), "a read key may use {path}");
                    continue;
                }
                if method == "get" || operation["security"].is_null() {
                    continue;
                }
                assert!(operation["responses"]["403"].is_object(), "{method} {path} does not document 403");
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked}");
    }

    /// An id in a path states its form, so a client (and schemathesis)
    /// knows which ids the server reads.
    #[test]
    fn every_path_id_states_its_pattern() {
        let doc = document();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("item") {
                for param in operation["parameters"].as_array().into_iter().flatten().filter(|p| p["in"] == "path") {
                    let schema = resolve(&doc, &param["schema"]);
                    assert!(schema["pattern"].is_string(), "{method} {path}: {} states no pattern", param["name"]);
                }
            }
        }
    }

    #[test]
    fn every_reference_resolves() {
        fn refs(value: &serde_json::Value, found: &mut Vec<String>) {
            match value {
                serde_json::Value::Object(map) => {
                    if let Some(serde_json::Value::String(r)) = map.get("$ref") {
                        found.push(r.clone());
                    }
                    map.values().for_each(|v| refs(v, found));
                }
                serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
                _ => {}
            }
        }
        let doc = document();
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for reference in found {
            let name = reference.strip_prefix("#/components/schemas/").expect("a schema reference");
            assert!(doc["components"]["schemas"].get(name).is_some(), "{reference} does not resolve");
        }
    }
}
