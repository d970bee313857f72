create or replace function ledger.compensation_requests_at(at_time timestamptz)
returns setof ledger.compensation_requests
language sql stable as $$
    select r.* from ledger.compensation_requests r
     where at_time is null or r.updated_at <= at_time
    union all
    select (jsonb_populate_record(null::ledger.compensation_requests, v.image)).*
      from ledger.compensation_requests r
     cross join lateral (
            select v.image from ledger.row_versions v
             where v.relname = 'compensation_requests' and v.row_id = r.id and v.at <= at_time
             order by v.id desc limit 1) v
     where at_time is not null and r.updated_at > at_time and r.created_at <= at_time
$$;

revoke all on function ledger.compensation_requests_at(timestamp with time zone) from public;
grant execute on function ledger.compensation_requests_at(timestamp with time zone) to effect_operator, effect_readonly;
