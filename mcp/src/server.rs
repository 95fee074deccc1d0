//! The MCP handler: what the server offers (tools, resources), which key a
//! request acts with, and the resources — a task's record at
//! `flotilla://tasks/{id}` and its stored screenshots at
//! `flotilla://tasks/{id}/screenshots/{seq}`; listing resources lists the
//! tenant's tasks, newest first, a page at a time.

use std::sync::Arc;

use flotilla_client::{ApiKey, Client};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CacheScope, Implementation, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool_handler, ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::answer::resource_error;
use crate::screenshot;

/// Resources listed per page: one page of the API's task list.
const RESOURCES_PER_PAGE: &str = "100";
const TASK_URI_PREFIX: &str = "flotilla://tasks/";

/// The key a request to the API's `/mcp` carries, put on the request by the
/// API once it has checked it; the tools act with it.
#[derive(Clone)]
pub struct CallerKey(pub ApiKey);

/// Where the key a call acts with comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// The client's own (stdio: the process's settings).
    Fixed,
    /// Each request's [`CallerKey`] (HTTP); none means none is sent.
    PerRequest,
}

/// The Flotilla MCP server; cloning is cheap.
#[derive(Clone)]
pub struct FlotillaMcp {
    client: Client,
    keys: Keys,
    pub(crate) tools: Arc<ToolRouter<FlotillaMcp>>,
}

impl FlotillaMcp {
    /// A server whose every call acts with `client`'s key; a call without
    /// one goes out without one, and the API answers it.
    pub fn with_fixed_key(client: Client) -> Self {
        Self { client: client.keyless_allowed(), keys: Keys::Fixed, tools: Arc::new(Self::tool_router()) }
    }

    /// A server whose calls act with the key of the request they came in.
    pub fn with_caller_keys(client: Client) -> Self {
        let client = client.with_key(None).keyless_allowed();
        Self { client, keys: Keys::PerRequest, tools: Arc::new(Self::tool_router()) }
    }

    /// The API client a request acts through.
    pub(crate) fn client_for(&self, context: &RequestContext<RoleServer>) -> Client {
        match self.keys {
            Keys::Fixed => self.client.clone(),
            Keys::PerRequest => {
                let parts = context.extensions.get::<http::request::Parts>();
                let key = parts.and_then(|parts| parts.extensions.get::<CallerKey>()).map(|caller| caller.0.clone());
                self.client.with_key(key)
            }
        }
    }
}

#[tool_handler(router = self.tools)]
impl ServerHandler for FlotillaMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_resources().build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("flotilla", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Flotilla runs computer-use tasks on a fleet of desktops. Submit a task (or a batch), wait for it \
                 with progress, look at its screenshots, answer it when it waits for a human, take its desktop \
                 over, and read what your tenant used. Tasks are records at flotilla://tasks/{id}.",
            )
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let client = self.client_for(&context);
        let cursor = request.and_then(|page| page.cursor);
        let query = [("limit", Some(RESOURCES_PER_PAGE.to_owned())), ("cursor", cursor)];
        let page = client.get(&["v1", "tasks"], &query).await.map_err(|err| resource_error(&err))?.value;
        let tasks = page.get("tasks").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut listed = ListResourcesResult::with_all_items(tasks.iter().filter_map(task_resource).collect());
        listed.next_cursor = page.get("next_cursor").and_then(Value::as_str).map(str::to_owned);
        Ok(listed.with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = vec![
            ResourceTemplate::new("flotilla://tasks/{id}", "task")
                .with_description("A task's record, as GET /v1/tasks/{id} answers it")
                .with_mime_type("application/json"),
            ResourceTemplate::new("flotilla://tasks/{id}/screenshots/{seq}", "screenshot")
                .with_description("A screenshot the task stored, by the seq of its screenshot event")
                .with_mime_type("image/png"),
        ];
        Ok(ListResourceTemplatesResult::with_all_items(templates).with_ttl_ms(0).with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let client = self.client_for(&context);
        let uri = request.uri;
        let contents = match parse_uri(&uri) {
            Some((id, None)) => {
                let task = client.get(&["v1", "tasks", id], &[]).await.map_err(|err| resource_error(&err))?;
                ResourceContents::text(task.raw, &uri).with_mime_type("application/json")
            }
            Some((id, Some(seq))) => {
                let shot = screenshot::fetch(&client, id, Some(seq)).await.map_err(|err| err.into_resource_error())?;
                ResourceContents::blob(shot.base64, &uri).with_mime_type(shot.mime_type)
            }
            None => return Err(ErrorData::resource_not_found("no such resource", Some(serde_json::json!({ "uri": uri })))),
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// A task of a list page as a resource.
fn task_resource(task: &Value) -> Option<Resource> {
    let id = task.get("id")?.as_str()?;
    let status = task.get("status").and_then(Value::as_str).unwrap_or("");
    let prompt = task.get("prompt").and_then(Value::as_str).unwrap_or("");
    Some(
        Resource::new(format!("{TASK_URI_PREFIX}{id}"), id)
            .with_description(format!("{status}: {prompt}"))
            .with_mime_type("application/json"),
    )
}

/// `flotilla://tasks/{id}` → `(id, None)`; `…/{id}/screenshots/{seq}` → `(id, Some(seq))`.
fn parse_uri(uri: &str) -> Option<(&str, Option<u64>)> {
    let rest = uri.strip_prefix(TASK_URI_PREFIX)?;
    match rest.split_once('/') {
        None if !rest.is_empty() => Some((rest, None)),
        Some((id, shot)) if !id.is_empty() => {
            let seq = shot.strip_prefix("screenshots/")?.parse().ok()?;
            Some((id, Some(seq)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_uri;

    #[test]
    fn resource_uris_name_a_task_or_one_of_its_screenshots() {
        assert_eq!(parse_uri("flotilla://tasks/tsk_1"), Some(("tsk_1", None)));
        assert_eq!(parse_uri("flotilla://tasks/tsk_1/screenshots/7"), Some(("tsk_1", Some(7))));
        for other in ["flotilla://tasks/", "flotilla://tasks/tsk_1/screenshots/x", "flotilla://tasks/tsk_1/other/1", "file:///x"]
        {
            assert_eq!(parse_uri(other), None, "{other}");
        }
    }
}
