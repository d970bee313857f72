-- A booking whose range overlaps one already made (succeeded) on its
-- target and action is not a retry of that one but a second booking of
-- the time: answered overlap, naming the booking it would have doubled,
-- on which the attempt is kept. Asked of a new key's range and of a
-- failed booking's retry (other_than: the failed one itself); null when
-- nothing overlaps.
create or replace function ledger.answer_double_booking(
    op_key text, action text, target text, during tstzrange, other_than bigint,
    requested_by text, request_id text, offered_hash text, offered_params jsonb
) returns ledger.begin_answer
language plpgsql
as $$
#variable_conflict use_column
declare
    booked ledger.effects;
begin
    select e.* into booked from ledger.effects e
     where e.target = answer_double_booking.target and e.action = answer_double_booking.action
       and e.id is distinct from answer_double_booking.other_than
       and e.state = 'succeeded' and e.during && answer_double_booking.during
     limit 1;
    if not found then
        return null;
    end if;
    perform ledger.record_attempt(booked, 'overlap', answer_double_booking.requested_by,
        answer_double_booking.request_id, answer_double_booking.offered_hash,
        answer_double_booking.offered_params,
        jsonb_build_object('op_key', answer_double_booking.op_key,
                           'during', answer_double_booking.during::text));
    return ('overlap'::text, booked.id, booked.state,
        jsonb_build_object('overlaps', booked.op_key, 'during', booked.during::text))::ledger.begin_answer;
end
$$;

revoke all on function ledger.answer_double_booking(text,text,text,tstzrange,bigint,text,text,text,jsonb) from public;
