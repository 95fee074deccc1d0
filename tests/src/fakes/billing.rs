//! Billing as the model APIs document it, for the fakes: a [`Biller`]
//! reads each request, counts its tokens and works out what its provider's
//! prompt cache would read and write, and writes that into the answer's
//! usage, so tests and the benchmark see the bill a real run would.
//!
//! What each provider documents and this models:
//! - **Anthropic** (explicit caching): `cache_control` breakpoints, at most
//!   [`MAX_BREAKPOINTS`] (more is a 400). The prompt is tools, then system,
//!   then messages, block by block; a breakpoint caches the prefix ending
//!   at its block, when that prefix is at least the model's minimum
//!   cacheable length. A request reads the longest cached prefix found at a
//!   breakpoint or up to [`LOOKBACK_BLOCKS`] blocks before one, and writes
//!   the rest up to its last breakpoint. Entries live [`CACHE_TTL`] (or an
//!   hour with `ttl: "1h"`), refreshed when read. Any change to a block
//!   (an image dropped, a tool changed) changes every prefix after it.
//!   Server-side tool-result clearing (`context_management` with
//!   `clear_tool_uses_20250919`: past `trigger` tool uses, all but the
//!   newest `keep` results are replaced by a placeholder) applies before
//!   the prompt is read, so what it clears changes the prefix from there.
//!   Usage: `input_tokens` (after the last breakpoint),
//!   `cache_creation_input_tokens`, `cache_read_input_tokens`.
//! - **OpenAI** (automatic caching): a prompt of 1024 tokens or more has
//!   its longest prefix seen before (within [`CACHE_TTL`]) read from the
//!   cache, in steps of 128 tokens. With `previous_response_id` the prompt
//!   is the stored conversation followed by the new input. Usage:
//!   `input_tokens` (all of them) and `input_tokens_details.cached_tokens`
//!   (and `cache_write_tokens`, the newly cached part, for the models
//!   that bill writes).
//! - **Gemini** (implicit caching): as OpenAI's, from the model's minimum
//!   (4096 tokens for Gemini 3 models); usage `promptTokenCount` (all of
//!   them) and `cachedContentTokenCount`.
//!
//! Tokens are counted as the providers' guides estimate them: text at 4
//! characters a token; an image at width × height / 750 (Anthropic), at
//! 85 + 170 a 512-px tile once scaled to 768 px on its short side (OpenAI),
//! at 258 a 768-px tile (Gemini).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// How long a cache entry lives after its last use.
pub const CACHE_TTL: Duration = Duration::from_secs(5 * 60);
/// The most `cache_control` breakpoints one Anthropic request may carry.
pub const MAX_BREAKPOINTS: usize = 4;
/// How many blocks before a breakpoint Anthropic looks for a cached prefix.
pub const LOOKBACK_BLOCKS: usize = 20;
/// OpenAI caches prefixes in steps of this many tokens.
const OPENAI_STEP: u64 = 128;
/// The shortest prompt OpenAI caches.
const OPENAI_MIN: u64 = 1024;

/// A provider's cache, as one API key's requests share it.
pub struct Biller {
    provider: Provider,
    /// Prefix digests cached and when each expires.
    cache: HashMap<[u8; 32], Instant>,
    /// OpenAI: each stored response's conversation, block by block.
    stored: HashMap<String, Vec<Block>>,
    /// How far the fake's clock is ahead of the real one (tests move it).
    skew: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    Anthropic,
    OpenAi,
    Gemini,
}

/// One block of a prompt: its digest and tokens, and the breakpoint on it.
#[derive(Debug, Clone)]
struct Block {
    digest: [u8; 32],
    tokens: u64,
    breakpoint: Option<Duration>,
}

/// What a request was billed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bill {
    /// Every input token.
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Biller {
    pub fn anthropic() -> Self {
        Self::new(Provider::Anthropic)
    }

    pub fn openai() -> Self {
        Self::new(Provider::OpenAi)
    }

    pub fn gemini() -> Self {
        Self::new(Provider::Gemini)
    }

    fn new(provider: Provider) -> Self {
        Self { provider, cache: HashMap::new(), stored: HashMap::new(), skew: Duration::ZERO }
    }

    /// Moves the cache's clock on (entries past their TTL expire).
    pub fn advance(&mut self, by: Duration) {
        self.skew += by;
    }

    fn now(&self) -> Instant {
        Instant::now() + self.skew
    }

    /// Bills `request` and writes the usage into `answer` (a success body);
    /// `Err` is an error body the API would answer instead.
    pub fn bill(&mut self, request: &Value, answer: &mut Value) -> Result<Bill, Value> {
        match self.provider {
            Provider::Anthropic => {
                let bill = self.bill_anthropic(request)?;
                let usage = &mut answer["usage"];
                usage["input_tokens"] = json!(bill.input - bill.cache_read - bill.cache_write);
                usage["cache_creation_input_tokens"] = json!(bill.cache_write);
                usage["cache_read_input_tokens"] = json!(bill.cache_read);
                usage["cache_creation"] = json!({"ephemeral_5m_input_tokens": bill.cache_write, "ephemeral_1h_input_tokens": 0});
                Ok(bill)
            }
            Provider::OpenAi => {
                let bill = self.bill_openai(request, answer);
                let usage = &mut answer["usage"];
                usage["input_tokens"] = json!(bill.input);
                usage["input_tokens_details"] = json!({"cached_tokens": bill.cache_read, "cache_write_tokens": bill.cache_write});
                let output = usage["output_tokens"].as_u64().unwrap_or(0);
                usage["total_tokens"] = json!(bill.input + output);
                Ok(bill)
            }
            Provider::Gemini => {
                let bill = self.bill_implicit(gemini_blocks(request), GEMINI_MIN);
                let usage = &mut answer["usageMetadata"];
                let output =
                    usage["candidatesTokenCount"].as_u64().unwrap_or(0) + usage["thoughtsTokenCount"].as_u64().unwrap_or(0);
                usage["promptTokenCount"] = json!(bill.input);
                usage["cachedContentTokenCount"] = json!(bill.cache_read);
                usage["totalTokenCount"] = json!(bill.input + output);
                Ok(bill)
            }
        }
    }

    fn bill_anthropic(&mut self, request: &Value) -> Result<Bill, Value> {
        let model = request["model"].as_str().unwrap_or_default();
        let blocks = anthropic_blocks(&cleared(request));
        let breakpoints: Vec<usize> = blocks.iter().enumerate().filter(|(_, b)| b.breakpoint.is_some()).map(|(i, _)| i).collect();
        if breakpoints.len() > MAX_BREAKPOINTS {
            let message =
                format!("A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.", breakpoints.len());
            return Err(json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}));
        }
        let prefixes = prefixes(model, &blocks);
        let total = blocks.iter().map(|b| b.tokens).sum();
        let now = self.now();
        self.cache.retain(|_, expires| *expires > now);
        // The longest cached prefix at a breakpoint or within the lookback before one.
        let read_at = breakpoints
            .iter()
            .filter_map(|&b| (b.saturating_sub(LOOKBACK_BLOCKS - 1)..=b).rev().find(|&i| self.cache.contains_key(&prefixes[i].0)))
            .max();
        let read = read_at.map_or(0, |i| prefixes[i].1);
        if let Some(i) = read_at {
            let ttl = blocks[..=i].iter().rev().find_map(|b| b.breakpoint).unwrap_or(CACHE_TTL);
            self.cache.insert(prefixes[i].0, now + ttl);
        }
        let minimum = anthropic_minimum(model);
        let mut written_to = read;
        for &b in breakpoints.iter().filter(|&&b| prefixes[b].1 >= minimum && Some(b) > read_at) {
            self.cache.insert(prefixes[b].0, now + blocks[b].breakpoint.unwrap_or(CACHE_TTL));
            written_to = written_to.max(prefixes[b].1);
        }
        Ok(Bill { input: total, cache_read: read, cache_write: written_to - read })
    }

    fn bill_openai(&mut self, request: &Value, answer: &Value) -> Bill {
        let mut blocks = match request["previous_response_id"].as_str().and_then(|id| self.stored.get(id)) {
            Some(stored) => stored.clone(),
            None => openai_head(request),
        };
        blocks.extend(request["input"].as_array().into_iter().flatten().map(|item| block(item, openai_tokens(item))));
        let bill = self.bill_implicit(blocks.clone(), OPENAI_MIN);
        let writes = answer["model"].as_str().is_some_and(|m| m.starts_with("gpt-6"));
        let cached_now = if bill.input >= OPENAI_MIN { bill.input / OPENAI_STEP * OPENAI_STEP } else { 0 };
        let bill = Bill { cache_write: if writes { cached_now.saturating_sub(bill.cache_read) } else { 0 }, ..bill };
        if let Some(id) = answer["id"].as_str() {
            blocks.extend(answer["output"].as_array().into_iter().flatten().map(|item| block(item, openai_tokens(item))));
            self.stored.insert(id.to_owned(), blocks);
        }
        bill
    }

    /// Automatic prefix caching: the longest prefix seen before, when the
    /// prompt is at least `minimum` tokens (OpenAI's in 128-token steps).
    fn bill_implicit(&mut self, blocks: Vec<Block>, minimum: u64) -> Bill {
        let prefixes = prefixes("", &blocks);
        let total: u64 = blocks.iter().map(|b| b.tokens).sum();
        let now = self.now();
        self.cache.retain(|_, expires| *expires > now);
        if total < minimum {
            return Bill { input: total, ..Bill::default() };
        }
        let hit = prefixes.iter().rev().find(|(digest, _)| self.cache.contains_key(digest)).map_or(0, |(_, tokens)| *tokens);
        let read = if self.provider == Provider::OpenAi { hit / OPENAI_STEP * OPENAI_STEP } else { hit };
        for (digest, _) in &prefixes {
            self.cache.insert(*digest, now + CACHE_TTL);
        }
        Bill { input: total, cache_read: read.min(total), cache_write: 0 }
    }
}

/// Each block's prefix digest (chained from `model`) and the tokens up to
/// and including it.
fn prefixes(model: &str, blocks: &[Block]) -> Vec<([u8; 32], u64)> {
    let mut digest: [u8; 32] = Sha256::digest(model.as_bytes()).into();
    let mut tokens = 0;
    blocks
        .iter()
        .map(|block| {
            let mut hasher = Sha256::new();
            hasher.update(digest);
            hasher.update(block.digest);
            digest = hasher.finalize().into();
            tokens += block.tokens;
            (digest, tokens)
        })
        .collect()
}

/// A block of `value` (its `cache_control` left out) with `tokens`.
fn block(value: &Value, tokens: u64) -> Block {
    let mut plain = value.clone();
    let breakpoint = plain.as_object_mut().and_then(|o| o.remove("cache_control")).map(|c| match c["ttl"].as_str() {
        Some("1h") => Duration::from_secs(3600),
        _ => CACHE_TTL,
    });
    Block { digest: Sha256::digest(plain.to_string().as_bytes()).into(), tokens, breakpoint }
}

/// An Anthropic request's prompt, block by block: tools, system, messages.
fn anthropic_blocks(request: &Value) -> Vec<Block> {
    let mut blocks: Vec<Block> =
        request["tools"].as_array().into_iter().flatten().map(|t| block(t, text_tokens(&t.to_string()))).collect();
    match &request["system"] {
        Value::String(text) => blocks.push(block(&json!({"type": "text", "text": text}), text_tokens(text))),
        Value::Array(parts) => blocks.extend(parts.iter().map(|p| block(p, text_tokens(p["text"].as_str().unwrap_or_default())))),
        _ => {}
    }
    for message in request["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        match &message["content"] {
            Value::String(text) => blocks.push(block(&json!({"role": role, "text": text}), text_tokens(text))),
            Value::Array(parts) => {
                for part in parts {
                    let mut tagged = part.clone();
                    tagged["role"] = json!(role);
                    blocks.push(block(&tagged, anthropic_tokens(part)));
                }
            }
            _ => {}
        }
    }
    blocks
}

/// The text a cleared tool result is replaced by.
const CLEARED: &str = "[tool result cleared to save context]";

/// `request` with its `clear_tool_uses_20250919` edits applied.
fn cleared(request: &Value) -> Value {
    let mut request = request.clone();
    let edits = request["context_management"]["edits"].as_array().cloned().unwrap_or_default();
    for edit in edits.iter().filter(|e| e["type"] == "clear_tool_uses_20250919") {
        let trigger = edit["trigger"]["value"].as_u64().unwrap_or(100_000) as usize;
        let keep = edit["keep"]["value"].as_u64().unwrap_or(3) as usize;
        let results: Vec<(usize, usize)> = request["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .flat_map(|(m, message)| {
                let blocks = message["content"].as_array().cloned().unwrap_or_default();
                blocks.into_iter().enumerate().filter(|(_, b)| b["type"] == "tool_result").map(move |(b, _)| (m, b))
            })
            .collect();
        if results.len() <= trigger {
            continue;
        }
        for &(m, b) in &results[..results.len().saturating_sub(keep)] {
            request["messages"][m]["content"][b]["content"] = json!([{"type": "text", "text": CLEARED}]);
        }
    }
    request
}

/// The tokens of one Anthropic content block, images nested in a
/// tool_result included.
fn anthropic_tokens(part: &Value) -> u64 {
    match part["type"].as_str() {
        Some("image") => image_size(part["source"]["data"].as_str()).map_or(1600, |(w, h)| (w * h).div_ceil(750)),
        Some("tool_result") => match &part["content"] {
            Value::Array(inner) => inner.iter().map(anthropic_tokens).sum::<u64>() + 10,
            other => text_tokens(&other.to_string()) + 10,
        },
        Some("text") => text_tokens(part["text"].as_str().unwrap_or_default()),
        Some("thinking") => text_tokens(part["thinking"].as_str().unwrap_or_default()),
        _ => text_tokens(&part.to_string()),
    }
}

/// The smallest prefix a Claude model caches, per Anthropic's table.
fn anthropic_minimum(model: &str) -> u64 {
    let large = [
        "claude-opus-4-5",
        "claude-opus-4-6",
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-opus-5",
        "claude-haiku",
        "claude-fable",
        "claude-mythos",
    ];
    if large.iter().any(|prefix| model.starts_with(prefix)) {
        4096
    } else if model.starts_with("claude-sonnet-4-6") || model.starts_with("claude-sonnet-5") {
        2048
    } else {
        1024
    }
}

/// OpenAI's prompt before its input: instructions and tools.
fn openai_head(request: &Value) -> Vec<Block> {
    let head = json!({"instructions": request["instructions"], "tools": request["tools"]});
    vec![block(&head, text_tokens(&head.to_string()))]
}

/// The tokens of one OpenAI input or output item.
fn openai_tokens(item: &Value) -> u64 {
    let mut tokens = 0;
    let mut text = item.clone();
    visit_images(&mut text, &mut |url| {
        let data = url.split_once("base64,").map(|(_, d)| d);
        tokens += image_size(data).map_or(765, |(w, h)| openai_image_tokens(w, h));
    });
    tokens + text_tokens(&text.to_string())
}

/// OpenAI's high-detail image tokens: scaled into 2048 × 2048, then to 768
/// on its short side; 170 a 512-px tile plus 85.
fn openai_image_tokens(width: u64, height: u64) -> u64 {
    let fit = (2048.0 / width.max(height) as f64).min(1.0);
    let (w, h) = (width as f64 * fit, height as f64 * fit);
    let short = (768.0 / w.min(h)).min(1.0);
    let (w, h) = ((w * short).ceil() as u64, (h * short).ceil() as u64);
    85 + 170 * w.div_ceil(512) * h.div_ceil(512)
}

/// Replaces every `image_url` string of an OpenAI item by a marker, giving
/// the URL to `found`.
fn visit_images(value: &mut Value, found: &mut impl FnMut(&str)) {
    match value {
        Value::Object(fields) => {
            for (key, inner) in fields.iter_mut() {
                if key == "image_url" {
                    if let Some(url) = inner.as_str() {
                        found(url);
                        *inner = json!("image");
                    }
                } else {
                    visit_images(inner, found);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|inner| visit_images(inner, found)),
        _ => {}
    }
}

/// A Gemini request's prompt, part by part: system instruction and tools,
/// then every part of every content.
fn gemini_blocks(request: &Value) -> Vec<Block> {
    let head = json!({"system": request["systemInstruction"], "tools": request["tools"]});
    let mut blocks = vec![block(&head, text_tokens(&head.to_string()))];
    for content in request["contents"].as_array().into_iter().flatten() {
        for part in content["parts"].as_array().into_iter().flatten() {
            let mut tagged = part.clone();
            tagged["role"] = content["role"].clone();
            blocks.push(block(&tagged, gemini_tokens(part)));
        }
    }
    blocks
}

/// The tokens of one Gemini part: 258 a 768-px tile of an inline image.
fn gemini_tokens(part: &Value) -> u64 {
    let mut tokens = 0;
    let mut text = part.clone();
    strip_inline_data(&mut text, &mut |data| {
        tokens +=
            image_size(Some(data)).map_or(
                258,
                |(w, h)| {
                    if w <= 384 && h <= 384 {
                        258
                    } else {
                        258 * w.div_ceil(768) * h.div_ceil(768)
                    }
                },
            );
    });
    tokens + text_tokens(&text.to_string())
}

fn strip_inline_data(value: &mut Value, found: &mut impl FnMut(&str)) {
    match value {
        Value::Object(fields) => {
            if let Some(data) = fields.get("inlineData").and_then(|d| d["data"].as_str()).map(str::to_owned) {
                found(&data);
                fields.insert("inlineData".into(), json!("image"));
            }
            fields.values_mut().for_each(|inner| strip_inline_data(inner, found));
        }
        Value::Array(items) => items.iter_mut().for_each(|inner| strip_inline_data(inner, found)),
        _ => {}
    }
}

/// The smallest prompt Gemini 3 models' implicit cache takes.
const GEMINI_MIN: u64 = 4096;

/// Text at four characters a token.
fn text_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The width and height of a base64 PNG, from its IHDR chunk.
fn image_size(base64: Option<&str>) -> Option<(u64, u64)> {
    let head = base64?.get(..44)?;
    let bytes = BASE64_STANDARD.decode(head).ok()?;
    if bytes.get(..8)? != b"\x89PNG\r\n\x1a\n" {
        return None;
    }
    let width = u32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?);
    let height = u32::from_be_bytes(bytes.get(20..24)?.try_into().ok()?);
    Some((u64::from(width), u64::from(height)))
}

impl Biller {
    /// Prefixes cached now (for tests of the cache itself).
    pub fn entries(&self) -> usize {
        let now = self.now();
        self.cache.values().filter(|expires| **expires > now).count()
    }
}
