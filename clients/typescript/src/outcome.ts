// How a provider call that threw is recorded. Only an explicit
// not-performed is a failure: anything else thrown after dispatch may have
// happened at the provider, so it is unknown, with the class the ledger
// uses to tell a timeout from a reset, a 5xx or an unreadable answer.

import { NotPerformed, ProviderError, RateLimited } from "./errors.js";

export interface Outcome {
  outcome: "failed" | "unknown";
  errorClass: string | null;
  retryable: boolean | null;
  reason: string;
  retryAfter: number | null;
}

const TIMEOUT_CODES = new Set(["ETIMEDOUT", "ESOCKETTIMEDOUT", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);
const RESET_CODES = new Set(["ECONNRESET", "EPIPE", "ECONNABORTED", "UND_ERR_SOCKET", "UND_ERR_CLOSED"]);

export function outcomeOf(error: unknown): Outcome {
  const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const unknown = (errorClass: string | null): Outcome => ({ outcome: "unknown", errorClass, retryable: null, reason, retryAfter: null });
  if (error instanceof RateLimited) {
    return { outcome: "failed", errorClass: "rate_limited", retryable: true, reason, retryAfter: error.retryAfter };
  }
  if (error instanceof NotPerformed) {
    return error.retryable
      ? { outcome: "failed", errorClass: null, retryable: true, reason, retryAfter: null }
      : { outcome: "failed", errorClass: "business_rejection", retryable: false, reason, retryAfter: null };
  }
  // fetch() wraps the socket's error in a TypeError's cause.
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 5; cause = cause.cause, depth++) {
    const code = (cause as { code?: unknown }).code;
    if (cause.name === "TimeoutError" || (typeof code === "string" && TIMEOUT_CODES.has(code))) return unknown("timeout");
    if (typeof code === "string" && RESET_CODES.has(code)) return unknown("connection_reset");
  }
  const status = (error as { status?: unknown } | null)?.status;
  if (error instanceof ProviderError || (typeof status === "number" && status >= 500 && status <= 599)) {
    return unknown("server_error");
  }
  if (error instanceof SyntaxError) return unknown("invalid_response");
  return unknown(null);
}
