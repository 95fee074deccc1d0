//! Command-line arguments: the options every command shares and one enum
//! variant per command, so a new command is one variant, one args struct and
//! one module under `commands/`.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use flotilla_types::open::Vocabulary;
use flotilla_types::task::{Priority, TaskStatus};
use serde_json::{json, Value};

use crate::client::ApiKey;
use crate::json_text::{self, Position};

/// Where the API listens unless `--api` or `FLOTILLA_API_URL` says otherwise.
pub const DEFAULT_API_URL: &str = "http://127.0.0.1:8080";

#[derive(Debug, Parser)]
#[command(name = "flotilla", version, about = "Command-line client of the Flotilla API")]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted before or after any command.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Base URL of the Flotilla API
    #[arg(
        long,
        global = true,
        env = "FLOTILLA_API_URL",
        default_value = DEFAULT_API_URL,
        value_name = "URL"
    )]
    pub api: String,
    /// API key, sent as a bearer token on every /v1 call
    #[arg(
        long,
        global = true,
        env = "FLOTILLA_API_KEY",
        hide_env_values = true,
        value_name = "KEY",
        value_parser = ApiKey::parse
    )]
    pub key: Option<ApiKey>,
    /// Print the JSON the API returned (one object per line for event streams)
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Submit a task and print its id
    Submit(SubmitArgs),
    /// Follow tasks' progress events until they finish
    Watch(WatchArgs),
    /// List tasks
    Tasks(TasksArgs),
    /// Show one task: a summary (the whole record with --json)
    Task(TaskArgs),
    /// Cancel a queued or running task
    Cancel(TaskArgs),
    /// Let a task that waits for a human go on (a safety check, a question)
    Approve(InputArgs),
    /// End a task that waits for a human
    Deny(InputArgs),
    /// Print a URL of a running task's live desktop (view only unless --mode control)
    View(ViewArgs),
    /// Take a running task's desktop over: its agent pauses; prints a control view URL
    Takeover(TaskArgs),
    /// Hand a taken-over desktop back to its agent, with a message for it
    Release(ReleaseArgs),
    /// Submit a batch of tasks, one spec per line of a JSON Lines file, and show its progress
    Batch(BatchArgs),
    /// List schedules, or create, show, pause, resume or delete one
    Schedules(SchedulesArgs),
    /// List webhook endpoints, or add or remove one, list its deliveries or retry one
    Webhooks(WebhooksArgs),
    /// Show your queue: queued and running tasks, lanes, and what waiting tasks wait for
    Queues,
    /// Show what your tenant used per UTC day (tasks, tokens, sandbox time) and its limits
    Usage(UsageArgs),
    /// Serve the fleet's tools to an MCP client (Claude Code, …) on stdin and stdout
    Mcp,
    /// Run an evaluation suite and show its report, or show a past run's report
    Eval(EvalArgs),
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub action: EvalAction,
}

#[derive(Debug, Subcommand)]
pub enum EvalAction {
    /// Run a suite: a JSON Lines file of task specs or OSWorld tasks, an
    /// OSWorld task file, or a folder of them; show progress, then the report
    Run(EvalRunArgs),
    /// Show the report of a batch run before
    Report(EvalReportArgs),
}

#[derive(Debug, Args)]
pub struct EvalRunArgs {
    /// The suite: FILE.jsonl, FILE.json or a folder of .json files ("-" reads JSON Lines from stdin)
    #[arg(value_name = "SUITE")]
    pub suite: PathBuf,
    /// Run every task with each value: model=a,b or pipeline=x,y (repeatable)
    #[arg(long, value_name = "KEY=A,B", value_parser = parse_matrix_axis)]
    pub matrix: Vec<(String, Vec<String>)>,
    /// Run each task this many times, independently
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Run each task this many times and keep its best run
    #[arg(long)]
    pub best_of: Option<u32>,
    /// With --best-of: cancel a task's other runs once one passes
    #[arg(long)]
    pub stop_on_pass: bool,
    /// Spec fields every task starts from, as a JSON object; each task's fields win
    #[arg(long, value_name = "JSON", value_parser = parse_object)]
    pub defaults: Option<Value>,
    /// Run OSWorld tasks' scripted reference solutions (`flotilla_reference`)
    /// with the scripted pipeline: a dry run of the suite without a model
    #[arg(long)]
    pub reference: bool,
    /// Print the batch id and return without waiting for the report
    #[arg(long)]
    pub no_wait: bool,
}

#[derive(Debug, Args)]
pub struct EvalReportArgs {
    /// The batch id
    pub batch: String,
}

#[derive(Debug, Default, Args)]
pub struct UsageArgs {
    /// First UTC day, YYYY-MM-DD (default: 29 days before --to)
    #[arg(long)]
    pub from: Option<String>,
    /// Last UTC day, YYYY-MM-DD (default: today)
    #[arg(long)]
    pub to: Option<String>,
}

#[derive(Debug, Default, Args)]
pub struct SubmitArgs {
    /// What to do (overrides the prompt of --spec)
    pub prompt: Option<String>,
    /// Agent pipeline to run the task with: openai-cua, claude-computer-use,
    /// gemini-computer-use, claude-code, scripted or browser (the API checks
    /// the name)
    #[arg(long, value_name = "NAME")]
    pub pipeline: Option<String>,
    /// Model name for the pipeline
    #[arg(long)]
    pub model: Option<String>,
    /// Queue lane
    #[arg(long, value_parser = one_of::<Priority>())]
    pub priority: Option<Priority>,
    /// A scripted action as a JSON object, e.g. '{"type":"wait","ms":200}' (repeatable)
    #[arg(long = "action", value_name = "JSON", value_parser = parse_action)]
    pub action: Vec<Value>,
    /// Add a wait action of N milliseconds (repeatable, in order with --action)
    #[arg(long = "wait-ms", value_name = "N")]
    pub wait_ms: Vec<u64>,
    /// How many times the task may be attempted
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Same key and same body within 24 h gives back the same task
    #[arg(long, value_name = "K")]
    pub idempotency_key: Option<String>,
    /// Free JSON object returned with the task
    #[arg(long, value_name = "JSON", value_parser = parse_object)]
    pub metadata: Option<Value>,
    /// Do not start the task before this RFC 3339 time
    #[arg(long, value_name = "RFC3339")]
    pub not_before: Option<String>,
    /// A whole task spec as a JSON file ("-" reads stdin); other options override its fields
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// After submitting, follow the task like `flotilla watch`
    #[arg(long)]
    pub watch: bool,
    /// `--action` and `--wait-ms` merged in the order they were given.
    #[arg(skip)]
    pub actions: Vec<Value>,
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    /// A JSON Lines file of task specs, one object per line ("-" reads stdin)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Spec fields every task starts from, as a JSON object; each line's fields win
    #[arg(long, value_name = "JSON", value_parser = parse_object)]
    pub defaults: Option<Value>,
    /// Print the batch id and return without waiting for the tasks
    #[arg(long)]
    pub no_wait: bool,
}

#[derive(Debug, Args)]
pub struct WebhooksArgs {
    #[command(subcommand)]
    pub action: Option<WebhookAction>,
}

#[derive(Debug, Subcommand)]
pub enum WebhookAction {
    /// Add an endpoint; prints its id and its signing secret (shown this once)
    Add(AddWebhookArgs),
    /// List the endpoints (the same as no action)
    Ls,
    /// Remove an endpoint
    Rm(WebhookIdArgs),
    /// List an endpoint's deliveries, newest first
    Deliveries(WebhookIdArgs),
    /// Deliver a message again now
    Retry(RetryDeliveryArgs),
    /// Receive your tenant's deliveries here, through the API (no inbound
    /// port): each is checked against its signature and printed, or
    /// forwarded to a local URL; the temporary endpoint goes when you stop
    Listen(ListenArgs),
}

#[derive(Debug, Args)]
pub struct ListenArgs {
    /// Event types, comma-separated (default: every type)
    #[arg(long, value_delimiter = ',', value_name = "TYPES")]
    pub events: Vec<String>,
    /// Only this batch's events
    #[arg(long, value_name = "ID")]
    pub batch: Option<String>,
    /// Also post each delivery, with its signature headers, to this URL (e.g. http://127.0.0.1:3000/hooks)
    #[arg(long, value_name = "URL")]
    pub forward_to: Option<String>,
}

#[derive(Debug, Args)]
pub struct AddWebhookArgs {
    /// Where to post (https://, or http:// where the fleet allows it)
    #[arg(value_name = "URL")]
    pub url: String,
    /// Event types, comma-separated: task.succeeded, task.failed, task.cancelled, task.waiting, batch.completed
    #[arg(long, value_delimiter = ',', required = true, value_name = "TYPES")]
    pub events: Vec<String>,
    /// Only this batch's events
    #[arg(long, value_name = "ID")]
    pub batch: Option<String>,
}

#[derive(Debug, Args)]
pub struct WebhookIdArgs {
    /// Webhook id (`whk_…`)
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct RetryDeliveryArgs {
    /// Webhook id (`whk_…`)
    #[arg(value_name = "ID")]
    pub id: String,
    /// Message id, as `deliveries` lists it
    #[arg(value_name = "MSG_ID")]
    pub msg_id: String,
}

#[derive(Debug, Args)]
pub struct SchedulesArgs {
    #[command(subcommand)]
    pub action: Option<ScheduleAction>,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// Create a schedule that enqueues the task of --spec at each due time
    Create(CreateScheduleArgs),
    /// Show one schedule
    Show(ScheduleIdArgs),
    /// Stop a schedule from firing until it is resumed
    Pause(ScheduleIdArgs),
    /// Let a paused schedule fire again, from its next due time after now
    Resume(ScheduleIdArgs),
    /// Delete a schedule (the tasks it made stay)
    Delete(ScheduleIdArgs),
}

#[derive(Debug, Args)]
pub struct CreateScheduleArgs {
    /// Cron pattern of five fields: minute hour day-of-month month day-of-week
    #[arg(long, value_name = "PATTERN")]
    pub cron: String,
    /// IANA time zone the pattern is read in
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub timezone: String,
    /// The task spec as a JSON file ("-" reads stdin)
    #[arg(long, value_name = "FILE")]
    pub spec: PathBuf,
    /// What to do when a run comes due while the previous task is still active
    #[arg(long, value_parser = ["skip", "allow"], default_value = "skip")]
    pub overlap: String,
    /// Create it paused
    #[arg(long)]
    pub paused: bool,
}

#[derive(Debug, Args)]
pub struct ScheduleIdArgs {
    /// Schedule id
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Task ids to follow
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// Every event as it comes (by default: the events that matter, each
    /// task's lines together once it ends, and a count of its actions)
    #[arg(long, short)]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct TasksArgs {
    /// Only tasks in this status
    #[arg(long, value_parser = one_of::<TaskStatus>())]
    pub status: Option<TaskStatus>,
    /// Only tasks of this batch
    #[arg(long, value_name = "ID")]
    pub batch: Option<String>,
    /// At most this many tasks
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Continue a listing from the cursor the previous page gave
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// Task id
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct InputArgs {
    /// Task id
    #[arg(value_name = "ID")]
    pub id: String,
    /// A note for the task: the clarification it asked for, or why it is denied
    #[arg(long, short)]
    pub message: Option<String>,
}

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Task id
    #[arg(value_name = "ID")]
    pub id: String,
    /// `view` ignores your keyboard and mouse; `control` passes them on
    #[arg(long, value_enum, default_value = "view")]
    pub mode: ViewMode,
}

/// How a live view treats the viewer's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ViewMode {
    View,
    Control,
}

impl ViewMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ViewMode::View => "view",
            ViewMode::Control => "control",
        }
    }
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Task id
    #[arg(value_name = "ID")]
    pub id: String,
    /// What the agent should know about what you did
    #[arg(long, short)]
    pub message: Option<String>,
}

/// Reads one of the names of a vocabulary of `flotilla-types`
/// ([`Priority::ALL`], [`TaskStatus::ALL`]), listing them in `--help`.
fn one_of<T: Vocabulary + Send + Sync>() -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(T::ALL.iter().map(|value| value.name()))
        .map(|name| T::of_name(&name).expect("clap allows only the listed names"))
}

/// Parses the process arguments, exiting with clap's message on bad usage.
pub fn parse() -> Cli {
    parse_from(std::env::args_os()).unwrap_or_else(|err| err.exit())
}

/// Parses arguments as given; tests call this with their own.
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Command::Submit(submit), Some(("submit", sub))) = (&mut cli.command, matches.subcommand()) {
        submit.actions = ordered_actions(submit, sub);
    }
    Ok(cli)
}

/// Interleaves `--action` and `--wait-ms` by their position on the command line.
fn ordered_actions(submit: &SubmitArgs, matches: &ArgMatches) -> Vec<Value> {
    let mut indexed: Vec<(usize, Value)> = Vec::new();
    if let Some(indices) = matches.indices_of("action") {
        indexed.extend(indices.zip(submit.action.iter().cloned()));
    }
    if let Some(indices) = matches.indices_of("wait_ms") {
        indexed.extend(indices.zip(submit.wait_ms.iter().map(|ms| json!({"type": "wait", "ms": ms}))));
    }
    indexed.sort_by_key(|(index, _)| *index);
    indexed.into_iter().map(|(_, action)| action).collect()
}

/// `model=a,b` → `("model", ["a", "b"])`.
fn parse_matrix_axis(text: &str) -> Result<(String, Vec<String>), String> {
    let (key, values) = text.split_once('=').ok_or("expected KEY=A,B, like model=a,b")?;
    if key != "model" && key != "pipeline" {
        return Err(format!("a matrix axis is model or pipeline, not {key:?}"));
    }
    let values: Vec<String> = values.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect();
    if values.is_empty() {
        return Err(format!("{key} needs at least one value"));
    }
    Ok((key.to_owned(), values))
}

fn parse_object(text: &str) -> Result<Value, String> {
    let value = json_text::parse(text, Position::Column)?;
    if !value.is_object() {
        return Err("expected a JSON object".to_owned());
    }
    Ok(value)
}

fn parse_action(text: &str) -> Result<Value, String> {
    let value = parse_object(text)?;
    if !value.get("type").is_some_and(Value::is_string) {
        return Err("an action needs a \"type\", e.g. {\"type\":\"wait\",\"ms\":200}".to_owned());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(args: &[&str]) -> SubmitArgs {
        let cli = parse_from(["flotilla", "submit"].iter().chain(args)).expect("parses");
        match cli.command {
            Command::Submit(submit) => submit,
            other => panic!("not submit: {other:?}"),
        }
    }

    #[test]
    fn actions_keep_their_command_line_order() {
        let args = submit(&["--wait-ms", "100", "--action", r#"{"type":"screenshot"}"#, "--wait-ms", "5"]);
        assert_eq!(
            args.actions,
            vec![json!({"type": "wait", "ms": 100}), json!({"type": "screenshot"}), json!({"type": "wait", "ms": 5})]
        );
    }

    #[test]
    fn approve_and_deny_take_a_task_and_an_optional_message() {
        let cli = parse_from(["flotilla", "deny", "tsk_1", "-m", "wrong site"]).expect("parses");
        match cli.command {
            Command::Deny(args) => assert_eq!((args.id.as_str(), args.message.as_deref()), ("tsk_1", Some("wrong site"))),
            other => panic!("not deny: {other:?}"),
        }
        assert!(matches!(parse_from(["flotilla", "approve", "tsk_1"]).expect("parses").command, Command::Approve(_)));
        assert!(parse_from(["flotilla", "approve"]).is_err(), "a task id is required");
    }

    #[test]
    fn an_action_without_a_type_is_refused() {
        assert!(parse_from(["flotilla", "submit", "x", "--action", r#"{"ms":1}"#]).is_err());
        assert!(parse_from(["flotilla", "submit", "x", "--metadata", "[1]"]).is_err());
    }

    #[test]
    fn batch_and_schedule_commands_parse() {
        let cli = parse_from(["flotilla", "batch", "tasks.jsonl", "--defaults", r#"{"pipeline":"scripted"}"#, "--no-wait"])
            .expect("parses");
        let Command::Batch(batch) = cli.command else { panic!("not batch") };
        assert!(batch.no_wait);
        assert_eq!(batch.defaults, Some(json!({"pipeline": "scripted"})));
        assert!(parse_from(["flotilla", "batch", "t.jsonl", "--defaults", "[]"]).is_err());

        let cli = parse_from(["flotilla", "schedules", "--json"]).expect("parses");
        assert!(matches!(cli.command, Command::Schedules(SchedulesArgs { action: None })));
        let cli = parse_from(["flotilla", "schedules", "create", "--cron", "*/5 * * * *", "--spec", "s.json"]).expect("parses");
        let Command::Schedules(SchedulesArgs { action: Some(ScheduleAction::Create(create)) }) = cli.command else {
            panic!("not create")
        };
        assert_eq!((create.timezone.as_str(), create.overlap.as_str(), create.paused), ("UTC", "skip", false));
        assert!(parse_from(["flotilla", "schedules", "pause"]).is_err(), "pause needs an id");
        assert!(parse_from(["flotilla", "schedules", "create", "--cron", "* * * * *", "--spec", "s", "--overlap", "x"]).is_err());
    }

    #[test]
    fn global_options_go_after_the_command_too() {
        let cli = parse_from(["flotilla", "tasks", "--json", "--api", "http://h:1", "--key", "k"]).expect("parses");
        assert!(cli.global.json);
        assert_eq!(cli.global.api, "http://h:1");
        assert!(cli.global.key.is_some());
    }
}
