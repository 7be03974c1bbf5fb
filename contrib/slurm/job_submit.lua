--[[
job_submit.lua: the site agent's part of Slurm's job_submit/lua plugin (contrib/slurm/README.md).

A job submitted into one of the agent's reservations (a name starting with PREFIX) gets
 * its time limit clamped to what is left of the reservation's window (from its start, or from
   now once it started), whole minutes rounded down: the reservation's end kills it anyway
   (ResvOverRun=0), and a limit the window cannot hold only misleads the backfill scheduler and
   the user;
 * a tag in its admin comment, "siteagent:reservation=NAME", which only operators may change:
   accounting keeps it (sacct -o AdminComment), so what the job used is attributed to the sale
   even where the reservation's own record is gone.
The same holds for a pending job moved into such a reservation (scontrol update ...
Reservation=NAME), whose tag of the reservation it leaves is replaced; a job moved out of the
agent's reservations (into another, or none) loses its tag, so that its usage never counts in
a reservation it no longer runs in. A reservation named twice (sa-X,sa-X) is that reservation.
Every other job is left exactly as submitted, and so is a job naming several reservations.

An error in here never rejects a job: the work runs under pcall, the functions always return
slurm.SUCCESS, and a job that could not be clamped runs as submitted (the reservation's end
still bounds it); the error goes to slurmctld's log.

slurmctld reads this file from the directory of slurm.conf; `siteagent install-service`
writes the agent's reservations.name_prefix into PREFIX.
]]

local PREFIX = "sa-"
local TAG = "siteagent:reservation="

-- Slurm's markers in a 32-bit field: no value given, and unlimited.
local NO_VAL = 4294967294
local INFINITE = 4294967295

-- The one reservation a job names (a list naming one, maybe more than once, is that one), or
-- nil for none or several.
local function the_reservation(named)
    if type(named) ~= "string" then
        return nil
    end
    local one = nil
    for name in string.gmatch(named, "[^,%s]+") do
        if one ~= nil and name ~= one then
            return nil
        end
        one = name
    end
    return one
end

local function is_ours(reservation)
    return type(reservation) == "string" and string.sub(reservation, 1, #PREFIX) == PREFIX
end

-- Whole minutes left in the reservation's window, at least one.
local function minutes_left(resv, now)
    local from = math.max(resv.start_time, now)
    return math.max(1, math.floor((resv.end_time - from) / 60))
end

-- `comment` without any of the agent's tags (nil stays nil).
local function untagged(comment)
    if comment == nil then
        return nil
    end
    local kept = string.gsub(comment, "%s*siteagent:reservation=[^%s]*", "")
    return (string.gsub(kept, "^%s+", ""))
end

local function tagged(comment, reservation)
    local tag = TAG .. reservation
    local rest = untagged(comment)
    if rest == nil or rest == "" then
        return tag
    end
    return rest .. " " .. tag
end

-- Clamp a job going into `reservation` whose limit is `limit` (minutes, or a marker), and add
-- the tag to its admin comment `comment`.
local function clamp(job_desc, reservation, limit, comment)
    local resv = slurm.reservations[reservation]
    if resv == nil then
        return -- no such reservation: Slurm refuses the job itself
    end
    local left = minutes_left(resv, os.time())
    if limit == nil or limit == NO_VAL or limit == INFINITE or limit > left then
        job_desc.time_limit = left
    end
    job_desc.admin_comment = tagged(comment, reservation)
end

local function guarded(what, work)
    local ok, err = pcall(work)
    if not ok then
        slurm.log_error("siteagent %s: %s (the job is left as submitted)", what, tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    return guarded("job_submit", function()
        local reservation = the_reservation(job_desc.reservation)
        if is_ours(reservation) then
            clamp(job_desc, reservation, job_desc.time_limit, job_desc.admin_comment)
        end
    end)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return guarded("job_modify", function()
        if job_desc.reservation == nil then
            return -- its reservation does not change
        end
        local reservation = the_reservation(job_desc.reservation)
        local comment = job_desc.admin_comment or job_rec.admin_comment
        if is_ours(reservation) then
            local limit = job_desc.time_limit
            if limit == nil or limit == NO_VAL then
                limit = job_rec.time_limit
            end
            clamp(job_desc, reservation, limit, comment)
        elseif comment ~= nil and untagged(comment) ~= comment then
            job_desc.admin_comment = untagged(comment) -- it left the agent's reservations
        end
    end)
end

return slurm.SUCCESS
