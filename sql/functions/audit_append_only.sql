create or replace function ledger.audit_append_only() returns trigger
language plpgsql as $$
begin
    if tg_op = 'DELETE' and ledger.moving_history() then
        return old;
    end if;
    raise exception 'ledger: ledger.audit_log is append-only (% refused)', tg_op
        using errcode = 'insufficient_privilege';
end
$$;

revoke all on function ledger.audit_append_only() from public;
