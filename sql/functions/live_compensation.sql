-- The compensation of an effect that is still in play.
create or replace function ledger.live_compensation(original_id bigint) returns ledger.effects
language sql stable
set search_path = pg_catalog, pg_temp
as $$
    select c.* from ledger.effects c
     where c.compensates = original_id
       and ledger.compensation_in_play(c)
       and ledger.reverses_the_effect(c.params)
     order by c.id desc
     limit 1
$$;

revoke all on function ledger.live_compensation(bigint) from public;
