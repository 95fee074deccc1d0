//! The tools, named as the contract names them, each one call (or a few)
//! of the API with the caller's key: what the API answers is the result.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_router, RoleServer};
use serde_json::{json, Value};

use crate::answer::tool_result;
use crate::arguments::{
    BatchArguments, InputArguments, ListArguments, ScreenshotArguments, TaskRef, UsageArguments, WaitArguments,
};
use crate::server::FlotillaMcp;
use crate::{screenshot, spec_schema, wait};

#[tool_router(vis = "pub(crate)")]
impl FlotillaMcp {
    #[tool(
        name = "submit_task",
        description = "Submit a computer-use task: the arguments are a task spec (prompt, pipeline, model, sandbox, \
                       priority, budget, …), as POST /v1/tasks takes it. Answers the task's id and links.",
        input_schema = spec_schema::task_spec()
    )]
    async fn submit_task(&self, Parameters(spec): Parameters<JsonObject>, context: RequestContext<RoleServer>) -> CallToolResult {
        let client = self.client_for(&context);
        tool_result(client.post(&["v1", "tasks"], Some(&Value::Object(spec))).await)
    }

    #[tool(
        name = "submit_batch",
        description = "Submit a batch of tasks (POST /v1/batches): `tasks` are task specs, each laid over `defaults`. \
                       Answers the batch's id and its tasks' ids in order."
    )]
    async fn submit_batch(
        &self,
        Parameters(batch): Parameters<BatchArguments>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut body = json!({ "tasks": batch.tasks });
        if let Some(defaults) = batch.defaults {
            body["defaults"] = Value::Object(defaults);
        }
        tool_result(self.client_for(&context).post(&["v1", "batches"], Some(&body)).await)
    }

    #[tool(name = "get_task", description = "A task's record: status, steps, result, usage, screenshots (GET /v1/tasks/{id}).")]
    async fn read_task(&self, Parameters(task): Parameters<TaskRef>, context: RequestContext<RoleServer>) -> CallToolResult {
        tool_result(self.client_for(&context).get(&["v1", "tasks", &task.id], &[]).await)
    }

    #[tool(
        name = "list_tasks",
        description = "Your tenant's tasks, newest first, a page at a time (GET /v1/tasks); pass `next_cursor` as \
                       `cursor` for the next page."
    )]
    async fn list_tasks(
        &self,
        Parameters(list): Parameters<ListArguments>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let query = [
            ("status", list.status),
            ("batch", list.batch),
            ("limit", list.limit.map(|limit| limit.to_string())),
            ("cursor", list.cursor),
        ];
        tool_result(self.client_for(&context).get(&["v1", "tasks"], &query).await)
    }

    #[tool(
        name = "wait_for_task",
        description = "Wait until a task ends (or `timeout_s` passes), with a progress notification per event it \
                       sends; answers the task's record."
    )]
    async fn wait_for_task(
        &self,
        Parameters(wait): Parameters<WaitArguments>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let client = self.client_for(&context);
        wait::wait_for_task(&client, &wait.id, wait.timeout_s, &context).await
    }

    #[tool(name = "cancel_task", description = "Cancel a queued or running task (POST /v1/tasks/{id}/cancel).")]
    async fn cancel_task(&self, Parameters(task): Parameters<TaskRef>, context: RequestContext<RoleServer>) -> CallToolResult {
        tool_result(self.client_for(&context).post(&["v1", "tasks", &task.id, "cancel"], None).await)
    }

    #[tool(
        name = "approve_task",
        description = "Let a task that waits for a human go on (a sensitive action, a question), with an optional \
                       message for its agent."
    )]
    async fn approve_task(
        &self,
        Parameters(input): Parameters<InputArguments>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(input, "approve", &context).await
    }

    #[tool(name = "deny_task", description = "End a task that waits for a human, with an optional message saying why.")]
    async fn deny_task(
        &self,
        Parameters(input): Parameters<InputArguments>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(input, "deny", &context).await
    }

    #[tool(
        name = "take_over",
        description = "Take a running task's desktop over: its agent pauses after its current action. Answers the \
                       control view's URL (`view.url`), to open in a browser."
    )]
    async fn take_over(&self, Parameters(task): Parameters<TaskRef>, context: RequestContext<RoleServer>) -> CallToolResult {
        tool_result(self.client_for(&context).post(&["v1", "tasks", &task.id, "takeover"], None).await)
    }

    #[tool(
        name = "get_screenshot",
        description = "A screenshot a task stored, as an image: the one at `seq` (see the task's `screenshots`), \
                       else the latest."
    )]
    async fn get_screenshot(
        &self,
        Parameters(shot): Parameters<ScreenshotArguments>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        match screenshot::fetch(&self.client_for(&context), &shot.id, shot.seq).await {
            Ok(found) => screenshot::tool_result(found),
            Err(err) => err.into_tool_result(),
        }
    }

    #[tool(
        name = "get_usage",
        description = "What your tenant used per UTC day (tasks, tokens, sandbox time) and its limits (GET /v1/usage)."
    )]
    async fn get_usage(
        &self,
        Parameters(usage): Parameters<UsageArguments>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let query = [("from", usage.from), ("to", usage.to)];
        tool_result(self.client_for(&context).get(&["v1", "usage"], &query).await)
    }
}

impl FlotillaMcp {
    /// `POST /v1/tasks/{id}/input` with `decision`.
    async fn answer(&self, input: InputArguments, decision: &str, context: &RequestContext<RoleServer>) -> CallToolResult {
        let mut body = json!({ "decision": decision });
        if let Some(message) = input.message {
            body["message"] = Value::String(message);
        }
        tool_result(self.client_for(context).post(&["v1", "tasks", &input.id, "input"], Some(&body)).await)
    }
}
