/**
 * Flotilla's TypeScript client on `fetch` (ESM; Node 20+ and browsers):
 * `Flotilla`, the types generated from the API's OpenAPI document
 * (`components`, `paths`), typed errors and webhook verification.
 */

export * from "./client.js";
export * from "./errors.js";
export type { BatchProgress } from "./progress.js";
export type { components, paths } from "./schema.js";
export { isTerminal, TERMINAL_TYPES, type StreamEvent } from "./sse.js";
export { verifyWebhook, type WebhookPayload } from "./webhooks.js";
export { DEFAULT_API_URL } from "./config.js";
