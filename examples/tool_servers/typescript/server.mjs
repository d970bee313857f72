// A refund tool server on the MCP TypeScript SDK 1.x (McpServer), over
// stdio, written to stand behind the effectwatch gateway.
//
// It reads the gateway's operation key from the request's
// `_meta["io.effectwatch/op_key"]` (the handler's `extra._meta`) and gives
// it to its provider as the idempotency key, and it says what happened in
// the result's `_meta["io.effectwatch/outcome"]`, so the gateway never has
// to guess from an error's wording whether a refund was made.
//
// Behind the gateway, from the repository's root (docs/tool-servers.md):
//
//     npm install --prefix examples/tool_servers/typescript
//     effectwatch gateway --policy examples/tool_servers/refunds.toml \
//         --upstream node examples/tool_servers/typescript/server.mjs
//
// The provider is a stand-in kept in memory: a refund on an order id
// starting DECLINE is declined, BUSY is turned away for now, TIMEOUT is made
// but its answer never comes back; any other is made once per key.

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const OP_KEY = "io.effectwatch/op_key";
const OUTCOME = "io.effectwatch/outcome";
const PROVIDER_REF = "io.effectwatch/provider_ref";
const RETRYABLE = "io.effectwatch/retryable";

/** The provider refused the refund: nothing was done. */
class Declined extends Error {}
/** The provider turned the refund away for now: nothing was done. */
class Busy extends Error {}
/** The provider did not answer: the refund may have been made. */
class ProviderTimeout extends Error {}

/** A payment provider's stand-in, idempotent by the key it is given. */
class Provider {
  refunds = new Map();
  #nextId = 1;

  refund(key, orderId, amountMinor, currency) {
    if (key !== undefined && this.refunds.has(key)) {
      return this.refunds.get(key);
    }
    if (orderId.startsWith("DECLINE")) {
      throw new Declined(`order ${orderId} is not refundable`);
    }
    if (orderId.startsWith("BUSY")) {
      throw new Busy("too many refunds at once; try again in a minute");
    }
    const made = {
      id: `re_${String(this.#nextId++).padStart(4, "0")}`,
      order_id: orderId,
      amount_minor: amountMinor,
      currency,
      idempotency_key: key ?? null,
    };
    this.refunds.set(key ?? made.id, made);
    if (orderId.startsWith("TIMEOUT")) {
      throw new ProviderTimeout("the provider did not answer within 10 s");
    }
    return made;
  }

  count(orderId) {
    return [...this.refunds.values()].filter((made) => made.order_id === orderId).length;
  }
}

const provider = new Provider();
const server = new McpServer({ name: "example-refunds", version: "0.1.0" });

const text = (said) => [{ type: "text", text: said }];

server.registerTool(
  "refund",
  {
    description: "Refund an order through the payment provider (amount in minor units).",
    inputSchema: { order_id: z.string(), amount_minor: z.number().int(), currency: z.string() },
    annotations: { destructiveHint: true, idempotentHint: false },
  },
  async ({ order_id, amount_minor, currency }, extra) => {
    const key = extra._meta?.[OP_KEY];
    let made;
    try {
      made = provider.refund(key, order_id, amount_minor, currency);
    } catch (error) {
      if (error instanceof Declined) {
        return {
          content: text(`The provider declined the refund: ${error.message}.`),
          isError: true,
          _meta: { [OUTCOME]: "not_performed" },
        };
      }
      if (error instanceof Busy) {
        return {
          content: text(`No refund was made: ${error.message}.`),
          isError: true,
          _meta: { [OUTCOME]: "not_performed", [RETRYABLE]: true },
        };
      }
      if (error instanceof ProviderTimeout) {
        return {
          content: text(`The refund may have been made: ${error.message}.`),
          isError: true,
          _meta: { [OUTCOME]: "unknown" },
        };
      }
      throw error;
    }
    return {
      content: text(`Refunded ${amount_minor} ${currency} on order ${order_id} (${made.id}).`),
      structuredContent: made,
      _meta: { [OUTCOME]: "performed", [PROVIDER_REF]: made.id },
    };
  },
);

server.registerTool(
  "lookup_refunds",
  {
    description: "The refunds the payment provider holds for an order.",
    inputSchema: { order_id: z.string() },
    outputSchema: { order_id: z.string(), count: z.number().int() },
    annotations: { readOnlyHint: true },
  },
  async ({ order_id }) => {
    const found = { order_id, count: provider.count(order_id) };
    return { content: text(JSON.stringify(found)), structuredContent: found };
  },
);

await server.connect(new StdioServerTransport());
