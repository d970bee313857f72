-- Every audited change names who made it and why: refused before anything
-- is written when either is blank. `what` ends the message ("to prune").
create or replace function ledger.require_who_and_why(who text, why text, what text) returns void
language plpgsql immutable as $$
begin
    if coalesce(btrim(who), '') = '' then
        raise exception 'ledger: an operator name is required' using errcode = 'invalid_parameter_value';
    end if;
    if coalesce(btrim(why), '') = '' then
        raise exception 'ledger: a reason is required %', what using errcode = 'invalid_parameter_value';
    end if;
end
$$;

revoke all on function ledger.require_who_and_why(text,text,text) from public;
