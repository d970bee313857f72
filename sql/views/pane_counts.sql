create or replace view ledger.pane_counts as select * from ledger.pane_counts_at(null);

revoke all on ledger.pane_counts from public;
grant select on ledger.pane_counts to effect_operator, effect_readonly;
