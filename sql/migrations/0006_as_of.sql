-- The ledger as of an instant. Every view an operator, a finance reviewer
-- or a responder reads (the panes, escalations, approvals, audit, finance)
-- is written once, as a function of an instant `at_time` over the relations
-- below; its live view is that function at null, which means "now".
--
-- ledger.effects_at(T) is ledger.effects as it stood at T:
--   * fast path: an effect not changed since T (updated_at <= T) is as it
--     was, and at null every effect is: the rows of the table itself, so a
--     live pane's predicate reaches its partial index (the function is
--     inlined; `at_time is null` folds to a constant);
--   * an effect changed since T gets the changing columns of its version
--     current at T (ledger.effect_history) over its row; the columns that
--     never change (key, action, target, params, amount…) are its own.
-- So reading the past costs what is open then plus what changed since.
-- Instants are transaction times (now() of the writing transaction), as
-- every timestamp of the ledger.

-- The instant a view is read at: T, or now for the live view.
create function ledger.instant(at_time timestamptz) returns timestamptz
language sql stable parallel safe as $$
    select coalesce(at_time, now())
$$;

create function ledger.effects_at(at_time timestamptz) returns setof ledger.effects
language sql stable as $$
    select e.* from ledger.effects e
     where at_time is null or e.updated_at <= at_time
    union all
    select e.id, e.op_key, e.action, e.target, e.params, e.params_hash, e.amount_minor, e.currency,
           e.provider, e.requested_by, e.owner_role, e.approval_ref, e.approval_version,
           e.request_id, v.state, v.state_since, e.pending_window, v.deadline_at, v.external_ref,
           e.result, v.failure_reason, v.retryable, v.late_result_at, v.attention, v.version,
           e.created_at, v.dispatched_at, e.dispatched_by, e.dispatched_role, v.at, v.settled_at,
           e.compensates, v.held_by, v.duplicates_acknowledged_at, v.error_class, v.retry_not_before,
           e.during, e.double_candidate, e.creation_version_stored, e.latest_version_in_row
      from ledger.effects e
     cross join lateral (
            select v.* from ledger.effect_history v
             where v.effect_id = e.id and v.at <= at_time
             order by v.version desc limit 1) v
     where at_time is not null and e.updated_at > at_time and e.created_at <= at_time
$$;

-- One effect as it stood at T. Views join an effect by id through this,
-- as a lateral call: each id is then one primary-key lookup. A plain join
-- with ledger.effects_at(T) is flattened into a hash join over every row of
-- the ledger; `limit 1` (an id is one row at any instant) keeps the planner
-- from flattening it.
create function ledger.effect_at(effect_id bigint, at_time timestamptz) returns setof ledger.effects
language sql stable as $$
    select e.* from ledger.effects_at(at_time) e where e.id = effect_id limit 1
$$;

-- Escalations and compensation requests keep each version whole.
create function ledger.keep_row_version() returns trigger
language plpgsql as $$
begin
    insert into ledger.row_versions (relname, row_id, at, image)
    values (tg_table_name, new.id, new.updated_at, to_jsonb(new));
    return null;
end
$$;

create function ledger.touch_updated_at() returns trigger
language plpgsql as $$
begin
    new.updated_at := now();
    return new;
end
$$;

create trigger escalations_touch
    before insert or update on ledger.escalations
    for each row execute function ledger.touch_updated_at();
create trigger escalations_version
    after insert or update on ledger.escalations
    for each row execute function ledger.keep_row_version();
create trigger compensation_requests_touch
    before insert or update on ledger.compensation_requests
    for each row execute function ledger.touch_updated_at();
create trigger compensation_requests_version
    after insert or update on ledger.compensation_requests
    for each row execute function ledger.keep_row_version();
create trigger row_versions_append_only
    before update or delete on ledger.row_versions
    for each row execute function ledger.reject_change();
create trigger row_versions_no_truncate
    before truncate on ledger.row_versions
    for each statement execute function ledger.reject_change();
alter table ledger.escalations enable always trigger escalations_touch;
alter table ledger.escalations enable always trigger escalations_version;
alter table ledger.compensation_requests enable always trigger compensation_requests_touch;
alter table ledger.compensation_requests enable always trigger compensation_requests_version;
alter table ledger.row_versions enable always trigger row_versions_append_only;
alter table ledger.row_versions enable always trigger row_versions_no_truncate;

create function ledger.escalations_at(at_time timestamptz) returns setof ledger.escalations
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

create function ledger.compensation_requests_at(at_time timestamptz)
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
