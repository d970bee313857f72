create or replace function ledger.require_applicable(effect ledger.effects, what text) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
    why text := ledger.why_not(effect, what);
begin
    if why is not null then
        raise exception 'ledger: cannot % effect % in state %: %', replace(what, '_', ' '),
            (effect).op_key, (effect).state, why
            using errcode = 'EW422';
    end if;
end
$$;

revoke all on function ledger.require_applicable(ledger.effects,text) from public;
