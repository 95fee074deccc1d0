//! The protocol-faithful model servers checked by the providers' own
//! SDKs (PyPI `anthropic`, `openai`, `google-genai`, installed by
//! `scripts/setup.sh`): each scripted answer of a fake is fetched by the
//! SDK pointed at the fake's base URL and validated with the SDK's types
//! (`tests/sdk/*_check.py`), so the fakes cannot drift from the real wire
//! format. The request each SDK sends is compared with ours too, for the
//! fields the references could not confirm (the toolset entry, Gemini's
//! `computerUse` spelling).

use std::path::PathBuf;
use std::time::Duration;

use flotilla_tests::fakes::{anthropic, gemini, openai, Reply, ScriptedServer};
use flotilla_tests::python::venv_python;
use serde_json::{json, Value};

/// Runs `tests/sdk/<script>` against `server` for `kinds` (one per pushed
/// reply) and returns its one JSON line per case.
async fn check(script: &str, server: &ScriptedServer, kinds: &[&str]) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join(script);
    let run = tokio::process::Command::new(venv_python())
        .arg(&path)
        .arg(server.url())
        .arg(serde_json::to_string(kinds).expect("json"))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run).await.expect("the SDK check ends").expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{script} failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> = stdout.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
    assert_eq!(lines.len(), kinds.len(), "one answer per case: {stdout}");
    assert_eq!(server.remaining(), 0, "every scripted answer was fetched");
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_sdk_parses_every_answer_of_the_messages_fake() {
    let server = ScriptedServer::start().await;
    let toolset_turn = anthropic::message(
        vec![
            anthropic::signed_thinking("", "EqoBCkgIARABGAIiQempty"),
            anthropic::thinking("Click, scroll, type."),
            anthropic::text("Working."),
            anthropic::member("toolu_1", "left_click", json!({"coordinate": [512, 384]})),
            anthropic::member("toolu_2", "scroll", json!({"scroll_direction": "down", "scroll_amount": 3})),
            anthropic::member("toolu_3", "key", json!({"text": "ctrl+s", "repeat": 2})),
            anthropic::member("toolu_4", "zoom", json!({"region": [0, 0, 100, 100]})),
            anthropic::tool_use("toolu_5", "ask_human", json!({"question": "Which file?"})),
        ],
        "tool_use",
    );
    let cases: Vec<(&str, Reply)> = vec![
        ("message", Reply::json(toolset_turn)),
        ("message", anthropic::action_turn("toolu_6", json!({"action": "left_click", "coordinate": [1, 2]}))),
        ("message", anthropic::final_answer("Done.")),
        ("stream", anthropic::streamed_tool_turn("Let me look.", "toolu_7", "Bash", json!({"command": "ls"}))),
        ("stream", anthropic::streamed_answer("All done.")),
        ("error", anthropic::unsupported_tool("claude-opus-4-7", "computer_toolset_20260801", &["computer_20251124"])),
        ("error", anthropic::error(429, "rate_limit_error", "slow down")),
        ("error", anthropic::error(529, "overloaded_error", "Overloaded")),
    ];
    let kinds: Vec<&str> = cases.iter().map(|(kind, _)| *kind).collect();
    for (_, reply) in cases {
        server.push(reply);
    }
    let answers = check("anthropic_check.py", &server, &kinds).await;

    assert_eq!(
        answers[0]["blocks"],
        json!([
            ["thinking", null, null],
            ["thinking", null, null],
            ["text", null, null],
            ["member", "left_click", "ComputerLeftClickInput"],
            ["member", "scroll", "ComputerScrollInput"],
            ["member", "key", "ComputerKeyInput"],
            ["member", "zoom", "ComputerZoomInput"],
            ["tool_use", "ask_human", null],
        ]),
        "every member call is one of the SDK's typed member blocks"
    );
    assert_eq!(answers[0]["stop_reason"], "tool_use");
    assert_eq!(answers[0]["input_tokens"], anthropic::INPUT_TOKENS);
    assert_eq!(answers[1]["blocks"], json!([["tool_use", "computer", null]]));
    assert_eq!(answers[2]["stop_reason"], "end_turn");
    assert_eq!(answers[3]["blocks"], json!([["text", null, null], ["tool_use", "Bash", null]]));
    assert_eq!(answers[4]["events"][0], "message_start");
    assert_eq!((answers[5]["status"].as_u64(), answers[5]["type"].as_str()), (Some(400), Some("invalid_request_error")));
    assert!(answers[5]["message"].as_str().is_some_and(|m| m.contains("does not support tool types: computer_toolset_20260801")));
    assert_eq!(answers[6]["status"], 429);
    assert_eq!(answers[7]["status"], 529);

    let sdk_request = &server.received()[0];
    assert_eq!(sdk_request.header("anthropic-beta"), None, "the SDK sends the toolset without a beta header too");
    assert_eq!(
        sdk_request.body["tools"][0],
        json!({"type": "computer_toolset_20260801", "configs": {"zoom": {"enabled": false}}})
    );
    assert_eq!(sdk_request.body["thinking"], json!({"type": "adaptive", "display": "summarized"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_parses_every_answer_of_the_responses_fake() {
    let server = ScriptedServer::start().await;
    let checked = openai::with_safety_check(
        openai::computer_call("call_2", openai::click(1, 2, "left")),
        "sc_1",
        "malicious_instructions",
        "Careful.",
    );
    let cases: Vec<(&str, Reply)> = vec![
        (
            "response",
            openai::reply(
                "resp_1",
                vec![
                    openai::reasoning("Click then type."),
                    openai::computer_call_batch(
                        "call_1",
                        vec![
                            openai::click(10, 20, "left"),
                            openai::type_text("hi"),
                            openai::keypress(&["CTRL", "S"]),
                            openai::scroll(5, 5, 0, 300),
                        ],
                    ),
                ],
            ),
        ),
        ("response", openai::reply("resp_2", vec![checked])),
        ("response", openai::reply("resp_3", vec![openai::function_call("call_3", "ask_human", json!({"question": "Which?"}))])),
        ("response", openai::reply("resp_4", vec![openai::message("Done.")])),
        ("error", openai::error(429, "rate_limit_exceeded", "slow down")),
        ("error", openai::error(400, "invalid_request_error", "bad tool")),
    ];
    let kinds: Vec<&str> = cases.iter().map(|(kind, _)| *kind).collect();
    for (_, reply) in cases {
        server.push(reply);
    }
    let answers = check("openai_check.py", &server, &kinds).await;
    assert_eq!(
        answers[0]["items"],
        json!([["reasoning"], ["computer_call", "call_1", ["click", "type", "keypress", "scroll"], []]])
    );
    assert_eq!(answers[1]["items"], json!([["computer_call", "call_2", ["click"], ["sc_1"]]]));
    assert_eq!(answers[2]["items"], json!([["function_call", "call_3", "ask_human", {"question": "Which?"}]]));
    assert_eq!(answers[3]["output_text"], "Done.");
    assert_eq!(answers[4]["status"], 429);
    assert_eq!((answers[5]["status"].as_u64(), answers[5]["type"].as_str()), (Some(400), Some("invalid_request_error")));
    assert_eq!(server.received()[0].body["tools"], json!([{"type": "computer"}]), "the GA tool as the SDK sends it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_google_genai_sdk_parses_every_answer_of_the_gemini_fake() {
    let server = ScriptedServer::start().await;
    let confirm = gemini::confirming(json!({"x": 500, "y": 500}), "This buys something.");
    let cases: Vec<(&str, Reply)> = vec![
        (
            "content",
            gemini::calls_turn(vec![
                gemini::thought("The button is in the middle."),
                gemini::call("click", json!({"x": 500, "y": 500, "intent": "press OK"})),
                gemini::call("type_text_at", json!({"x": 10, "y": 20, "text": "hi"})),
            ]),
        ),
        ("content", gemini::calls_turn(vec![gemini::call("click_at", confirm)])),
        ("content", gemini::final_answer("Done.")),
        ("error", gemini::error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted")),
        ("error", gemini::error(400, "INVALID_ARGUMENT", "bad request")),
    ];
    let kinds: Vec<&str> = cases.iter().map(|(kind, _)| *kind).collect();
    for (_, reply) in cases {
        server.push(reply);
    }
    let answers = check("gemini_check.py", &server, &kinds).await;
    assert_eq!(
        answers[0]["parts"],
        json!([
            ["thought", "The button is in the middle."],
            ["call", "click", {"x": 500, "y": 500, "intent": "press OK"}, gemini::THOUGHT_SIGNATURE],
            ["call", "type_text_at", {"x": 10, "y": 20, "text": "hi"}, null],
        ])
    );
    assert_eq!(answers[0]["finish"], "STOP");
    assert_eq!(answers[0]["usage"], json!([gemini::PROMPT_TOKENS, gemini::CANDIDATE_TOKENS, gemini::THOUGHT_TOKENS]));
    assert_eq!(answers[1]["parts"][0][2]["safety_decision"]["decision"], "require_confirmation");
    assert_eq!(answers[2]["parts"], json!([["text", "Done."]]));
    assert_eq!((answers[3]["status"].as_u64(), answers[3]["state"].as_str()), (Some(429), Some("RESOURCE_EXHAUSTED")));
    assert_eq!(answers[4]["status"], 400);

    let sdk_request = &server.received()[0];
    assert_eq!(sdk_request.path, "/v1beta/models/gemini-3.6-flash:generateContent", "the path our client posts to");
    assert_eq!(sdk_request.header("x-goog-api-key"), Some("gemini-sdk-check"));
    assert_eq!(
        sdk_request.body["tools"][0],
        json!({"computerUse": {"environment": "ENVIRONMENT_DESKTOP"}}),
        "the tool entry spelled as our client spells it"
    );
    // Proto JSON takes either spelling of a field; the SDK writes this one in snake case.
    let thinking = &sdk_request.body["generationConfig"]["thinkingConfig"];
    assert!(thinking["includeThoughts"] == true || thinking["include_thoughts"] == true, "{thinking}");
}

/// The E2B stand-in driven by the official E2B SDK (`tests/sdk/e2b_check.py`,
/// PyPI `e2b` and `e2b-desktop`): its create, commands, exit codes, files
/// (multipart and raw uploads), status and kill answer as the SDK expects, and the Desktop SDK's stream
/// URL for the sandbox is the one the E2B provider builds (same host, path
/// and query; the provider keeps the stand-in's plain-http port).
#[tokio::test(flavor = "multi_thread")]
async fn the_e2b_sdk_drives_the_e2b_stand_in_sandbox() {
    use flotilla_sandboxd::{Sandboxd, SANDBOX_DOMAIN};
    use flotilla_worker::sandbox::{E2bProvider, EnvdAddress, SandboxId, StreamKey};

    let fake = Sandboxd::start().await;
    let config = fake.config();
    let EnvdAddress::Routed { base_url } = &config.envd else { panic!("the stand-in routes envd") };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join("e2b_check.py");
    let run = tokio::process::Command::new(venv_python())
        .arg(&path)
        .env("E2B_API_KEY", config.api_key.expose())
        .env("E2B_API_URL", &config.api_url)
        .env("E2B_SANDBOX_URL", base_url)
        .env("E2B_DOMAIN", SANDBOX_DOMAIN)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run).await.expect("the SDK check ends").expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "e2b_check.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_str(stdout.lines().last().expect("a JSON line")).expect("JSON");

    assert_eq!(seen["geometry"], "1024 768", "{seen}");
    assert_eq!((seen["cat"].as_str(), seen["read"].as_str()), (Some("written by the sdk"), Some("written by the sdk")), "{seen}");
    assert_eq!((seen["exit_code"].as_i64(), seen["stderr"].as_str()), (Some(3), Some("failing\n")), "{seen}");
    assert_eq!(seen["raw"], "00726177ff", "a raw upload keeps its bytes: {seen}");
    assert_eq!(seen["running"], true, "{seen}");
    let id = SandboxId::parse(seen["sandbox_id"].as_str().expect("sandbox id")).expect("a sandbox id");
    assert_eq!(fake.end_at(&id), None, "the SDK's kill ended the sandbox");

    let provider = E2bProvider::new(flotilla_worker::sandbox::E2bConfig { domain: SANDBOX_DOMAIN.into(), ..config.clone() })
        .expect("provider");
    let key = StreamKey::generate();
    let ours = provider.stream_page_url(&id, true, &key).replace(key.expose(), seen["stream_key"].as_str().expect("key"));
    let port = base_url.rsplit(':').next().expect("a port");
    let sdk = seen["stream_url"].as_str().expect("the SDK's stream URL");
    assert_eq!(ours.replacen("http://", "https://", 1).replacen(&format!(":{port}/"), "/", 1), sdk);
}

/// The browser pipeline's shapes in each fake, parsed by each SDK: Claude's
/// `browser_toolset_20260801` member calls (coordinate and ref targets, a
/// form value, a URL) as the SDK's typed browser blocks, with the tool
/// entry as the SDK sends it; Gemini's browser-environment functions, with
/// `ENVIRONMENT_BROWSER` spelled as our client spells it; OpenAI's
/// `navigate` function call beside the computer tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_parse_the_browser_answers_of_each_fake() {
    let anthropic_server = ScriptedServer::start().await;
    let by_ref = json!({"type": "ref", "ref": "ref_3"});
    anthropic_server.push(Reply::json(anthropic::message(
        vec![
            anthropic::browser_member("toolu_1", "navigate", json!({"url": "http://192.0.2.7/form"})),
            anthropic::browser_member("toolu_2", "read_page", json!({"filter": "interactive"})),
            anthropic::browser_member("toolu_3", "form_input", json!({"target": by_ref, "value": "Ada"})),
            anthropic::browser_member("toolu_4", "left_click", json!({"target": {"type": "coordinate", "x": 5, "y": 6}})),
            anthropic::browser_member("toolu_5", "key", json!({"text": "Return"})),
        ],
        "tool_use",
    )));
    let answers = check("anthropic_check.py", &anthropic_server, &["browser"]).await;
    assert_eq!(
        answers[0]["blocks"],
        json!([
            ["browser", "navigate", "BrowserNavigateInput"],
            ["browser", "read_page", "BrowserReadPageInput"],
            ["browser", "form_input", "BrowserFormInputInput"],
            ["browser", "left_click", "BrowserLeftClickInput"],
            ["browser", "key", "BrowserKeyInput"],
        ])
    );
    let sdk_tools = &anthropic_server.received()[0].body["tools"][0];
    let ours = flotilla_worker::model::anthropic::browser::definition();
    assert_eq!(sdk_tools["type"], ours["type"], "the toolset's type as the SDK sends it");
    assert_eq!(sdk_tools["configs"]["new_tab"], ours["configs"]["new_tab"], "a member turned off as the SDK turns it off");

    let gemini_server = ScriptedServer::start().await;
    gemini_server.push(gemini::calls_turn(vec![
        gemini::call("navigate", json!({"url": "http://192.0.2.7/form"})),
        gemini::call("go_back", json!({})),
        gemini::call("search", json!({})),
    ]));
    let answers = check("gemini_check.py", &gemini_server, &["browser"]).await;
    assert_eq!(answers[0]["parts"][0], json!(["call", "navigate", {"url": "http://192.0.2.7/form"}, gemini::THOUGHT_SIGNATURE]));
    assert_eq!(answers[0]["parts"][1][1], "go_back");
    assert_eq!(
        gemini_server.received()[0].body["tools"][0],
        json!({"computerUse": {"environment": "ENVIRONMENT_BROWSER"}}),
        "the browser environment spelled as our client spells it"
    );

    let openai_server = ScriptedServer::start().await;
    openai_server.push(openai::reply(
        "resp_1",
        vec![openai::function_call("call_1", "navigate", json!({"url": "http://192.0.2.7/form"}))],
    ));
    let answers = check("openai_check.py", &openai_server, &["response"]).await;
    assert_eq!(answers[0]["items"], json!([["function_call", "call_1", "navigate", {"url": "http://192.0.2.7/form"}]]));
}
