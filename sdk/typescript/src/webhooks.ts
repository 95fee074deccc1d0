/**
 * Checking a webhook delivery's signature with the Standard Webhooks
 * reference library (npm `standardwebhooks`): a delivery verifies only under
 * its endpoint's secret, unchanged, and within five minutes of its timestamp.
 */

import { Webhook } from "standardwebhooks";

import { InvalidSignatureError } from "./errors.js";

/** What a delivery carries: `type` (`task.succeeded`, …), `timestamp` and `data` (the task or batch). */
export interface WebhookPayload {
  type: string;
  timestamp: string;
  data: Record<string, unknown>;
}

type HeaderSource = Headers | Record<string, string | string[] | undefined>;

function headerRecord(headers: HeaderSource): Record<string, string> {
  const out: Record<string, string> = {};
  if (typeof (headers as Headers).forEach === "function" && typeof (headers as Headers).get === "function") {
    (headers as Headers).forEach((value, name) => {
      out[name.toLowerCase()] = value;
    });
    return out;
  }
  for (const [name, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (value !== undefined) {
      out[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value;
    }
  }
  return out;
}

/**
 * Verifies a delivery (its raw body and its `webhook-id`,
 * `webhook-timestamp` and `webhook-signature` headers) against the
 * endpoint's `whsec_` secret and answers its payload; throws
 * `InvalidSignatureError` otherwise.
 */
export function verifyWebhook(secret: string, body: string | Uint8Array, headers: HeaderSource): WebhookPayload {
  const text = typeof body === "string" ? body : new TextDecoder().decode(body);
  try {
    return new Webhook(secret).verify(text, headerRecord(headers)) as WebhookPayload;
  } catch (e) {
    throw new InvalidSignatureError(e instanceof Error ? e.message : String(e));
  }
}
