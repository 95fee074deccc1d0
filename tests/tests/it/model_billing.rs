//! The model servers bill prompt caching as the providers document it, and
//! the clients read what they bill: Anthropic's breakpoints (a second
//! request reads the prefix the first wrote, a prefix under the model's
//! minimum is never cached, five breakpoints are refused, an entry expires
//! after its five minutes, a changed earlier block is a miss from there,
//! server-side clearing changes the prefix), OpenAI's automatic caching of
//! chained responses (1024 tokens at least, in steps of 128) and Gemini's
//! implicit caching; and a 40-step Claude task on the default model reads
//! most of its input from the cache and costs far less than without.

use std::time::Duration;

use axum::body::Bytes;
use base64::prelude::{Engine as _, BASE64_STANDARD};
use flotilla_config::Secret;
use flotilla_tests::fakes::billing::{Bill, Biller};
use flotilla_tests::fakes::{anthropic, gemini, openai, Reply, ScriptedServer};
use flotilla_types::cost::PriceTable;
use flotilla_worker::model::anthropic::{AnthropicComputerUse, AnthropicConfig, ComputerTool};
use flotilla_worker::model::history::ImageHistory;
use flotilla_worker::model::http::Endpoint;
use flotilla_worker::model::{CallResult, ComputerModel, Screen, Usage};
use serde_json::{json, Value};

/// A PNG header of `width` × `height` (all the billing reads of an image).
fn png(width: u32, height: u32, salt: u8) -> String {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    bytes.extend(width.to_be_bytes());
    bytes.extend(height.to_be_bytes());
    bytes.extend([8, 2, 0, 0, 0, salt, salt, salt, salt]);
    BASE64_STANDARD.encode(bytes)
}

fn image(salt: u8) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(1280, 800, salt)}})
}

fn breakpoint(mut block: Value) -> Value {
    block["cache_control"] = json!({"type": "ephemeral"});
    block
}

/// A Claude request: a long system prompt (a breakpoint) and user turns.
fn claude_request(model: &str, turns: Vec<Value>) -> Value {
    let system = "You operate a desktop. ".repeat(900);
    json!({
        "model": model,
        "system": [breakpoint(json!({"type": "text", "text": system}))],
        "tools": [{"name": "ask_human", "input_schema": {"type": "object"}}],
        "messages": turns,
    })
}

fn user(blocks: Vec<Value>) -> Value {
    json!({"role": "user", "content": blocks})
}

fn bill(biller: &mut Biller, request: &Value) -> Bill {
    let mut answer = anthropic::message(vec![anthropic::text("ok")], "end_turn");
    biller.bill(request, &mut answer).expect("billed")
}

#[test]
fn a_claude_prefix_written_once_is_read_by_the_next_request_until_it_expires() {
    let mut biller = Biller::anthropic();
    let first = claude_request("claude-opus-5-5", vec![user(vec![image(1), breakpoint(json!({"type": "text", "text": "go"}))])]);
    let written = bill(&mut biller, &first);
    assert_eq!((written.cache_read, written.cache_write), (0, written.input), "everything up to the breakpoint is written");

    let mut second = first.clone();
    second["messages"][0]["content"][1] = json!({"type": "text", "text": "go"});
    second["messages"]
        .as_array_mut()
        .expect("messages")
        .push(json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}));
    second["messages"].as_array_mut().expect("messages").push(user(vec![breakpoint(image(2))]));
    let read = bill(&mut biller, &second);
    assert_eq!(read.cache_read, written.input, "the first request's prefix is read");
    assert!(read.cache_write > 1000, "the new turn is written: {read:?}");

    biller.advance(Duration::from_secs(6 * 60));
    let expired = bill(&mut biller, &second);
    assert_eq!(expired.cache_read, 0, "five minutes after its last use an entry is gone");
}

#[test]
fn a_short_prefix_is_never_cached_and_a_changed_block_misses_from_there() {
    let mut biller = Biller::anthropic();
    let short = json!({"model": "claude-opus-5-5", "messages": [user(vec![breakpoint(json!({"type": "text", "text": "hi"}))])]});
    let (once, twice) = (bill(&mut biller, &short), bill(&mut biller, &short));
    assert_eq!((once.cache_write, twice.cache_read), (0, 0), "under 4096 tokens nothing is cached");

    let turns = |salt: u8| {
        vec![
            user(vec![image(salt), json!({"type": "text", "text": "a"})]),
            json!({"role": "assistant", "content": [{"type": "text", "text": "b"}]}),
            user(vec![breakpoint(image(9))]),
        ]
    };
    bill(&mut biller, &claude_request("claude-opus-5-5", turns(1)));
    let changed = bill(&mut biller, &claude_request("claude-opus-5-5", turns(2)));
    let system_only =
        bill(&mut biller, &claude_request("claude-opus-5-5", vec![user(vec![breakpoint(json!({"type": "text", "text": "x"}))])]));
    assert!(
        changed.cache_read > 0 && changed.cache_read <= system_only.input,
        "a changed first image leaves only the tools and system prompt to read: {changed:?}"
    );
}

#[test]
fn more_than_four_breakpoints_are_refused_as_the_api_does() {
    let mut biller = Biller::anthropic();
    let blocks = (0..5).map(|i| breakpoint(json!({"type": "text", "text": format!("part {i}")}))).collect();
    let request = json!({"model": "claude-opus-5-5", "messages": [user(blocks)]});
    let mut answer = anthropic::message(vec![], "end_turn");
    let refused = biller.bill(&request, &mut answer).expect_err("refused");
    assert_eq!(refused["error"]["type"], "invalid_request_error");
    assert!(refused["error"]["message"].as_str().is_some_and(|m| m.contains("maximum of 4")), "{refused}");
}

#[test]
fn server_side_clearing_changes_the_prefix_from_the_first_cleared_result() {
    let mut biller = Biller::anthropic();
    let result = |i: u8| json!({"type": "tool_result", "tool_use_id": format!("t{i}"), "content": [image(i)]});
    let mut turns = Vec::new();
    for i in 0..6 {
        turns.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "left_click", "input": {}}]}));
        turns.push(user(vec![result(i)]));
    }
    let last = turns.len() - 1;
    turns[last]["content"][0] = breakpoint(turns[last]["content"][0].clone());
    let request = claude_request("claude-opus-5-5", turns);
    let whole = bill(&mut biller, &request);
    let mut clearing = request.clone();
    clearing["context_management"] = json!({"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 5}, "keep": {"type": "tool_uses", "value": 2}}]});
    let cleared = bill(&mut biller, &clearing);
    assert!(cleared.input < whole.input - 4 * 1000, "four screenshots cleared: {whole:?} then {cleared:?}");
    assert!(cleared.cache_read < whole.input / 2, "the cleared prefix is not the cached one: {cleared:?}");
}

#[test]
fn openai_reads_a_chained_conversation_from_the_cache_in_steps_of_128() {
    let mut biller = Biller::openai();
    let input = |salt: u8| json!([{"role": "user", "content": [{"type": "input_image", "image_url": format!("data:image/png;base64,{}", png(1280, 800, salt))}]}]);
    let mut first_answer = openai::response("resp_1", vec![openai::message("ok")], 0, 10);
    let first = biller.bill(&json!({"model": "gpt-6-astra", "input": input(1)}), &mut first_answer).expect("billed");
    assert_eq!(first.cache_read, 0);
    assert_eq!(first_answer["usage"]["input_tokens"], first.input);
    let mut second_answer = openai::response("resp_2", vec![openai::message("ok")], 0, 10);
    let second = biller
        .bill(&json!({"model": "gpt-6-astra", "previous_response_id": "resp_1", "input": input(2)}), &mut second_answer)
        .expect("billed");
    assert!(second.input > first.input, "the chained prompt holds the first turn");
    assert!(second.cache_read > 0 && second.cache_read.is_multiple_of(128) && second.cache_read <= first.input, "{second:?}");
    assert_eq!(second_answer["usage"]["input_tokens_details"]["cached_tokens"], second.cache_read);
}

#[test]
fn gemini_reads_a_repeated_prefix_of_4096_tokens_or_more() {
    let mut biller = Biller::gemini();
    let part = |salt: u8| json!({"inlineData": {"mimeType": "image/png", "data": png(1280, 800, salt)}});
    let contents = |n: u8| (0..n).map(|i| json!({"role": "user", "parts": [part(i)]})).collect::<Vec<_>>();
    let mut answer = gemini::response(vec![gemini::text("ok")]);
    let first = biller.bill(&json!({"contents": contents(5)}), &mut answer).expect("billed");
    assert!(first.input >= 4096 && first.cache_read == 0, "{first:?}");
    let mut answer = gemini::response(vec![gemini::text("ok")]);
    let second = biller.bill(&json!({"contents": contents(6)}), &mut answer).expect("billed");
    assert_eq!(second.cache_read, first.input, "the earlier request is the cached prefix");
    assert_eq!(answer["usageMetadata"]["cachedContentTokenCount"], second.cache_read);
    assert_eq!(answer["usageMetadata"]["promptTokenCount"], second.input);
}

fn screen(step: usize) -> Screen {
    let header = BASE64_STANDARD.decode(png(1280, 800, step as u8)).expect("png");
    Screen { png: Bytes::from(header), width: 1280, height: 800 }
}

/// The 40-step Claude task of `model`, with caching or not and the history given.
async fn claude_task(model: &str, caching: bool, history: Option<ImageHistory>) -> Usage {
    let server = ScriptedServer::start_billing(Biller::anthropic()).await;
    let narration = "The form is open. I will click the next control in the list, then check the page reacted.";
    for step in 0..40 {
        let call = anthropic::member(&format!("toolu_{step:03}"), "left_click", json!({"coordinate": [100 + step, 200]}));
        server.push(Reply::json(anthropic::message(vec![anthropic::thinking(narration), call], "tool_use")));
    }
    server.push(anthropic::final_answer("done"));
    let mut config = AnthropicConfig::new(Endpoint::new(server.url(), Secret::new("k")), model, ComputerTool::for_model(model));
    config.caching = caching;
    config.history = history;
    let mut client = AnthropicComputerUse::new(config, (1280, 800), None).expect("client");
    let mut turn = client.start("Fill in the form", &screen(0)).await.expect("first turn");
    let mut usage = turn.usage;
    let mut step = 0;
    while !turn.calls.is_empty() {
        step += 1;
        let results = turn
            .calls
            .iter()
            .map(|c| CallResult { call_id: c.id.clone(), screen: screen(step), text: None, is_error: false })
            .collect();
        turn = client.resume(results, &[]).await.expect("a turn");
        usage += turn.usage;
    }
    assert_eq!(step, 40);
    assert_eq!(server.bills().len(), 41, "every request billed");
    usage
}

#[tokio::test]
async fn a_long_claude_task_reads_most_of_its_input_from_the_cache() {
    let model = "claude-opus-5-5";
    let prices = PriceTable::defaults();
    let cost = |usage: &Usage| prices.cost_micros(model, &usage.counts()).expect("priced");
    let today = claude_task(model, false, None).await;
    let chunked = claude_task(model, true, Some(ImageHistory::new(3, 10))).await;
    assert_eq!(today.cache_read_tokens, 0, "no breakpoints, nothing read");
    let read_share = chunked.cache_read_tokens as f64 / chunked.input_tokens as f64;
    assert!(read_share >= 0.70, "{:.1} % of the input read from the cache: {chunked:?}", read_share * 100.0);
    let ratio = cost(&chunked) as f64 / cost(&today) as f64;
    assert!(ratio <= 0.40, "the cached task costs {:.1} % of today's loop", ratio * 100.0);
}
