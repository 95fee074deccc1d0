//! `flotilla-cost-bench`: what a computer-use task's model calls cost, per
//! pipeline and per way of keeping the conversation, billed as the
//! providers bill them.
//!
//! For each pipeline's model client (Claude, OpenAI, Gemini) it runs a task
//! of `--steps` actions against the protocol-faithful model server of the
//! test suite, started with its provider's [`Biller`] (prompt caching as
//! documented: breakpoints, minimum cacheable lengths, lookback, time to
//! live, what changes a prefix). Every step answers with a new screenshot
//! (a `--screen`-sized PNG) and the model narrates before each action, as
//! models do. It prints the billed tokens and the cost at the shipped
//! prices for:
//!
//! - **today**: the loop before prompt caching (Claude: no breakpoints,
//!   with each tool's own history: the toolset's append-only one that the
//!   server clears past 20 results down to the newest 5, the older tools'
//!   newest screenshot only; OpenAI and Gemini cache on their own, so
//!   their loop is the one they have);
//! - **cached**: caching with that same image history;
//! - **chunked**: caching with the history that keeps the newest
//!   screenshots and drops older ones a chunk at a time, for each
//!   `--histories` pair `keep/chunk` (the first is the default measured).
//!
//! Claude runs once per `--claude-models` model: the default model (of the
//! computer toolset, whose screenshots go by server-side clearing, asked
//! for a chunk at a time) and one of the older `computer_20251124` tool
//! (whose client drops them itself).

mod support;

use std::process::ExitCode;

use anyhow::{bail, Context};
use bytes::Bytes;
use serde_json::{json, Value};

use flotilla_config::Secret;
use flotilla_tests::fakes::billing::Biller;
use flotilla_tests::fakes::{anthropic, gemini, openai, Reply, ScriptedServer};
use flotilla_types::cost::{usd, PriceTable, TokenCounts};
use flotilla_worker::model::anthropic::{AnthropicComputerUse, AnthropicConfig, ComputerTool};
use flotilla_worker::model::gemini::{GeminiComputerUse, GeminiConfig, KEPT_SCREENSHOT_TURNS};
use flotilla_worker::model::history::ImageHistory;
use flotilla_worker::model::http::Endpoint;
use flotilla_worker::model::openai::{OpenAiConfig, OpenAiCua, OpenAiTool};
use flotilla_worker::model::{CallResult, ComputerModel, Screen, Turn, Usage};

const USAGE: &str = "flotilla-cost-bench — billed tokens and cost of a computer-use task per pipeline, today's loop against prompt caching and a chunked image history

usage: flotilla-cost-bench [--steps N] [--screen WxH] [--histories K/C,...] [--claude-models M,...] [--max-seconds S]

  --steps N          actions in the task (default 40)
  --screen WxH       the screenshot size the model sees (default 1280x800)
  --histories LIST   keep/chunk pairs of the chunked history (default 3/10,2/5,3/5,5/10,3/20)
  --claude-models L  the Claude models (default claude-opus-5-5,claude-opus-4-7)
  --max-seconds S    stop after this long (default 600)";

/// The words a model says before each action (about 60 tokens).
const NARRATION: &str = "The form is open and the cursor sits in the search field. I will click the next control \
     in the list, then check that the page reacted before moving on to the field after it, as the task asks.";

struct Args {
    steps: usize,
    screen: (u32, u32),
    histories: Vec<ImageHistory>,
    claude_models: Vec<String>,
    max_seconds: u64,
}

fn parse_args(mut list: impl Iterator<Item = String>) -> anyhow::Result<Option<Args>> {
    let mut args = Args {
        steps: 40,
        screen: (1280, 800),
        histories: [(3, 10), (2, 5), (3, 5), (5, 10), (3, 20)].into_iter().map(|(k, c)| ImageHistory::new(k, c)).collect(),
        claude_models: vec!["claude-opus-5-5".into(), "claude-opus-4-7".into()],
        max_seconds: 600,
    };
    while let Some(flag) = list.next() {
        if flag == "--help" {
            return Ok(None);
        }
        let value = list.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--steps" => {
                args.steps = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--steps {value:?} is not a positive whole number"))?
            }
            "--screen" => args.screen = support::parse_size(&value)?,
            "--histories" => args.histories = value.split(',').map(history).collect::<anyhow::Result<_>>()?,
            "--claude-models" => {
                args.claude_models = value.split(',').map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()).collect()
            }
            "--max-seconds" => {
                args.max_seconds = value.parse().with_context(|| format!("--max-seconds {value:?} is not a whole number"))?
            }
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Some(args))
}

fn history(text: &str) -> anyhow::Result<ImageHistory> {
    let parse = |n: &str| n.trim().parse::<usize>().ok().filter(|n| *n > 0);
    match text.split_once('/').map(|(k, c)| (parse(k), parse(c))) {
        Some((Some(keep), Some(chunk))) => Ok(ImageHistory::new(keep, chunk)),
        _ => bail!("--histories {text:?} is not keep/chunk, two positive whole numbers"),
    }
}

/// What one run was billed.
#[derive(Default)]
struct Billed {
    usage: Usage,
    cost_micros: u64,
}

impl Billed {
    fn add(&mut self, prices: &PriceTable, model: &str, usage: Usage) {
        self.usage += usage;
        self.cost_micros += prices.cost_micros(model, &usage.counts()).unwrap_or(0);
    }

    fn read_share(&self) -> f64 {
        self.usage.cache_read_tokens as f64 / self.usage.input_tokens.max(1) as f64
    }
}

/// A different screenshot for each step, `size` as the model sees it.
fn screen(size: (u32, u32), step: usize) -> anyhow::Result<Screen> {
    let (width, height) = size;
    let mut pixels = vec![230u8; (width * height * 3) as usize];
    for (i, byte) in pixels.iter_mut().enumerate().take(width as usize * 3 * 8) {
        *byte = ((i * 31 + step * 97) % 251) as u8;
    }
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.write_header()?.write_image_data(&pixels)?;
    Ok(Screen { png: Bytes::from(png), width, height })
}

/// Drives `model` through a task of `steps` actions whose answers the
/// server gives, one new screenshot a step.
async fn drive(model: &mut dyn ComputerModel, screens: &[Screen], prices: &PriceTable, name: &str) -> anyhow::Result<Billed> {
    let mut billed = Billed::default();
    let mut turn: Turn = model.start("Fill in the form on the screen, field by field.", &screens[0]).await?;
    for step in 1.. {
        billed.add(prices, name, turn.usage);
        if turn.calls.is_empty() {
            break;
        }
        let results = turn
            .calls
            .iter()
            .map(|call| CallResult {
                call_id: call.id.clone(),
                screen: screens[step % screens.len()].clone(),
                text: None,
                is_error: false,
            })
            .collect();
        turn = model.resume(results, &[]).await?;
    }
    Ok(billed)
}

/// One Claude run of `model`: with caching or not, and the history given
/// (`None`: the tool's own).
async fn claude(
    args: &Args,
    screens: &[Screen],
    prices: &PriceTable,
    model: &str,
    caching: bool,
    history: Option<ImageHistory>,
) -> anyhow::Result<Billed> {
    let server = ScriptedServer::start_billing(Biller::anthropic()).await;
    let tool = ComputerTool::for_model(model);
    for step in 0..args.steps {
        let id = format!("toolu_{step:03}");
        let blocks = if tool.is_toolset() {
            vec![anthropic::thinking(NARRATION), anthropic::member(&id, "left_click", json!({"coordinate": [100 + step, 200]}))]
        } else {
            vec![
                anthropic::text(NARRATION),
                anthropic::computer(&id, json!({"action": "left_click", "coordinate": [100 + step, 200]})),
            ]
        };
        server.push(Reply::json(anthropic::message(blocks, "tool_use")));
    }
    server.push(anthropic::final_answer("The form is filled in."));
    let mut config = AnthropicConfig::new(Endpoint::new(server.url(), Secret::new("k")), model, tool);
    config.caching = caching;
    config.history = history;
    let mut client = AnthropicComputerUse::new(config, args.screen, None)?;
    drive(&mut client, screens, prices, model).await
}

async fn openai_run(args: &Args, screens: &[Screen], prices: &PriceTable) -> anyhow::Result<Billed> {
    let server = ScriptedServer::start_billing(Biller::openai()).await;
    let model = OpenAiTool::Ga.default_model();
    for step in 0..args.steps {
        let call = openai::computer_call_batch(&format!("call_{step:03}"), vec![openai::click(100 + step as u32, 200, "left")]);
        let mut body = openai::response(&format!("resp_{step:03}"), vec![openai::reasoning(NARRATION), call], 0, 87);
        body["model"] = json!(model);
        server.push(Reply::json(body));
    }
    let mut last = openai::response("resp_final", vec![openai::message("The form is filled in.")], 0, 20);
    last["model"] = json!(model);
    server.push(Reply::json(last));
    let mut config = OpenAiConfig::new(Endpoint::new(server.url(), Secret::new("k")), OpenAiTool::Ga);
    config.model = model.to_owned();
    let mut client = OpenAiCua::new(config, args.screen, None)?;
    drive(&mut client, screens, prices, model).await
}

async fn gemini_run(args: &Args, screens: &[Screen], prices: &PriceTable, history: ImageHistory) -> anyhow::Result<Billed> {
    let server = ScriptedServer::start_billing(Biller::gemini()).await;
    for step in 0..args.steps {
        let parts = vec![gemini::thought(NARRATION), gemini::call("click_at", json!({"x": 100 + step, "y": 200}))];
        server.push(gemini::calls_turn(parts));
    }
    server.push(gemini::final_answer("The form is filled in."));
    let model = flotilla_config::DEFAULT_GEMINI_MODEL;
    let mut config = GeminiConfig::new(Endpoint::new(server.url(), Secret::new("k")), model);
    config.history = history;
    let mut client = GeminiComputerUse::new(config, None)?;
    drive(&mut client, screens, prices, model).await
}

fn row(pipeline: &str, mode: &str, billed: &Billed, today: &Billed) -> Vec<String> {
    let u = billed.usage;
    vec![
        pipeline.to_owned(),
        mode.to_owned(),
        u.input_tokens.to_string(),
        u.cache_read_tokens.to_string(),
        u.cache_write_tokens.to_string(),
        u.output_tokens.to_string(),
        format!("{:.1} %", billed.read_share() * 100.0),
        format!("${:.4}", usd(billed.cost_micros)),
        format!("{:.1} %", billed.cost_micros as f64 / today.cost_micros.max(1) as f64 * 100.0),
    ]
}

fn figures(pipeline: &str, mode: &str, billed: &Billed, today: &Billed) -> Value {
    let TokenCounts { input, output, cache_read, cache_write } = billed.usage.counts();
    json!({
        "pipeline": pipeline, "mode": mode, "input_tokens": input, "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write, "output_tokens": output, "cost_usd": usd(billed.cost_micros),
        "cache_read_share": billed.read_share(), "cost_vs_today": billed.cost_micros as f64 / today.cost_micros.max(1) as f64,
    })
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let prices = PriceTable::defaults();
    let screens: Vec<Screen> = (0..8).map(|step| screen(args.screen, step)).collect::<anyhow::Result<_>>()?;
    let mut rows = Vec::new();
    let mut report = Vec::new();
    let mut record = |rows: &mut Vec<Vec<String>>, pipeline: &str, mode: &str, billed: &Billed, today: &Billed| {
        rows.push(row(pipeline, mode, billed, today));
        report.push(figures(pipeline, mode, billed, today));
    };
    for model in &args.claude_models {
        let name = format!("claude ({model})");
        let today = claude(&args, &screens, &prices, model, false, None).await?;
        record(&mut rows, &name, "today", &today, &today);
        let cached = claude(&args, &screens, &prices, model, true, None).await?;
        record(&mut rows, &name, "cached", &cached, &today);
        for history in &args.histories {
            let chunked = claude(&args, &screens, &prices, model, true, Some(*history)).await?;
            record(&mut rows, &name, &format!("chunked {}/{}", history.keep, history.chunk), &chunked, &today);
        }
    }
    let openai_today = openai_run(&args, &screens, &prices).await?;
    let openai_name = format!("openai ({})", OpenAiTool::Ga.default_model());
    record(&mut rows, &openai_name, "today = cached = chained", &openai_today, &openai_today);
    let gemini_name = format!("gemini ({})", flotilla_config::DEFAULT_GEMINI_MODEL);
    let gemini_today = gemini_run(&args, &screens, &prices, ImageHistory::new(KEPT_SCREENSHOT_TURNS, 1)).await?;
    record(&mut rows, &gemini_name, "today = cached", &gemini_today, &gemini_today);
    for history in &args.histories {
        let chunked = gemini_run(&args, &screens, &prices, *history).await?;
        record(&mut rows, &gemini_name, &format!("chunked {}/{}", history.keep, history.chunk), &chunked, &gemini_today);
    }
    let header = ["pipeline", "history", "input", "cache read", "cache write", "output", "read share", "cost", "vs today"];
    support::print_table(&header, &rows);
    Ok(json!({"bench": "cost", "steps": args.steps, "screen": format!("{}x{}", args.screen.0, args.screen.1), "runs": report}))
}

fn main() -> ExitCode {
    support::main(parse_args(std::env::args().skip(1)), USAGE, |args| args.max_seconds, run)
}
