// The Vercel AI SDK (`ai`, 7.x) face of a wrapped effect: an AI SDK tool
// whose execute is the wrapped call. Its name is the key it is given in
// `tools: { ... }`. Whatever the call throws reaches the model as the
// tool's error (the AI SDK's tool-error, sent as error text, and the loop
// goes on) with the text of toolErrorFor: what happened, whether it may
// already have happened, what not to do. A replay returns the stored result.

import { jsonSchema, tool, type FlexibleSchema, type JSONSchema7, type Tool } from "ai";
import { toolErrorFor } from "./answers.js";

export { EffectToolError, toolErrorFor } from "./answers.js";

export interface EffectToolOptions<A> {
  /** What the tool does, for the model. */
  description: string;
  /**
   * The arguments' schema: a zod schema (or any Standard Schema, or an AI
   * SDK `jsonSchema(...)`), or a plain JSON schema object.
   */
  inputSchema: FlexibleSchema<A> | JSONSchema7;
}

/**
 * `effect` is a function made by `ledger.wrap(...)`: its key and target
 * come from the call's arguments, never from the tool call's id.
 */
export function effectTool<A extends Record<string, unknown>, R>(
  effect: (args: A) => Promise<R>,
  options: EffectToolOptions<NoInfer<A>>,
): Tool<A, R> {
  const made = tool({
    description: options.description,
    inputSchema: flexible(options.inputSchema) as FlexibleSchema<unknown>,
    execute: async (args: unknown): Promise<unknown> => {
      try {
        return await effect(args as A);
      } catch (error) {
        throw toolErrorFor(error);
      }
    },
  });
  // tool() only types its argument: the generic types are the call's own.
  return made as unknown as Tool<A, R>;
}

// A plain JSON schema becomes the AI SDK's own; anything the SDK knows
// (its schemas, lazy schemas, zod and other Standard Schemas) is kept.
function flexible<A>(schema: FlexibleSchema<A> | JSONSchema7): FlexibleSchema<A> {
  const known =
    typeof schema === "function" ||
    (typeof schema === "object" && schema !== null && ("~standard" in schema || Symbol.for("vercel.ai.schema") in schema));
  return known ? (schema as FlexibleSchema<A>) : jsonSchema<A>(schema as JSONSchema7);
}
