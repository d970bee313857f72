create or replace function ledger.escalations_at(at_time timestamptz) returns setof ledger.escalations
language sql stable as $$
    select s.* from ledger.escalations s
     where at_time is null or s.updated_at <= at_time
    union all
    select (jsonb_populate_record(null::ledger.escalations, v.image)).*
      from ledger.escalations s
     cross join lateral (
            select v.image from ledger.row_versions v
             where v.relname = 'escalations' and v.row_id = s.id and v.at <= at_time
             order by v.id desc limit 1) v
     where at_time is not null and s.updated_at > at_time and s.created_at <= at_time
$$;

revoke all on function ledger.escalations_at(timestamp with time zone) from public;
grant execute on function ledger.escalations_at(timestamp with time zone) to effect_operator, effect_readonly;
