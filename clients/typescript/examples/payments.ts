// A stand-in for a payment provider's client, so that the examples run
// anywhere: it makes one refund per idempotency key, as a real provider
// does, and counts the calls it receives — the ledger's work is that the
// same business action reaches it once.

export interface Refund {
  id: string;
  invoice: string;
  amount_minor: number;
  currency: string;
}

export class Payments {
  calls = 0;
  readonly refunds = new Map<string, Refund>();

  async refund(invoice: string, amountMinor: number, currency: string, options: { idempotencyKey: string }): Promise<Refund> {
    this.calls += 1;
    const made = this.refunds.get(options.idempotencyKey) ?? {
      id: `re_${this.refunds.size + 1}`,
      invoice,
      amount_minor: amountMinor,
      currency,
    };
    this.refunds.set(options.idempotencyKey, made);
    return made;
  }
}

export const payments = new Payments();
