/**
 * Where the API is and which key to send: options first, then
 * `FLOTILLA_API_URL` and `FLOTILLA_API_KEY` (where a `process.env` exists),
 * as the `flotilla` CLI reads them.
 */

import { ConfigurationError } from "./errors.js";

/** Where the API listens unless told otherwise (the CLI's default too). */
export const DEFAULT_API_URL = "http://127.0.0.1:8080";

export interface Settings {
  baseUrl: string;
  apiKey: string;
}

function environment(): Record<string, string | undefined> {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env ?? {};
}

/** The client's settings from its options and the environment. */
export function resolveSettings(baseUrl?: string, apiKey?: string, env = environment()): Settings {
  const url = (baseUrl || env.FLOTILLA_API_URL || DEFAULT_API_URL).trim().replace(/\/+$/, "");
  if (!/^https?:\/\//.test(url)) {
    throw new ConfigurationError(`invalid API URL ${JSON.stringify(url)}: it must start with http:// or https://`);
  }
  const key = (apiKey ?? env.FLOTILLA_API_KEY ?? "").trim();
  if (!key) {
    throw new ConfigurationError("no API key: pass apiKey or set FLOTILLA_API_KEY");
  }
  return { baseUrl: url, apiKey: key };
}
