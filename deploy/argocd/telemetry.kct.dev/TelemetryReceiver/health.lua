-- Argo CD health check for kct resources (telemetry.kct.dev). Reads what every kct controller writes:
-- status.observedGeneration and the standard conditions Ready and ReconciliationPaused.
--   not observed yet, or observed an older generation      -> Progressing
--   ReconciliationPaused=True (the pause annotation is set) -> Suspended
--   Ready=True                                             -> Healthy
--   Ready=False with a reason saying work is under way     -> Progressing
--   Ready=False with any other reason (a failure)          -> Degraded, "<reason>: <message>"
--   Ready=Unknown or no Ready condition                    -> Progressing
local hs = {}

-- Ready=False reasons that mean "not done yet" rather than "failed".
local progressing_reasons = {
  Progressing = true,
  Reconciling = true,
  Pending = true,
  RolloutInProgress = true,
}

local function find_condition(conditions, condition_type)
  if conditions == nil then
    return nil
  end
  for _, condition in ipairs(conditions) do
    if condition.type == condition_type then
      return condition
    end
  end
  return nil
end

local function describe(condition)
  local reason = condition.reason or "Unknown"
  if condition.message ~= nil and condition.message ~= "" then
    return reason .. ": " .. condition.message
  end
  return reason
end

local generation = obj.metadata.generation
local status = obj.status
if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the kct operator to reconcile this resource"
  return hs
end
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the kct operator to reconcile generation " .. generation ..
    " (observed " .. status.observedGeneration .. ")"
  return hs
end

local paused = find_condition(status.conditions, "ReconciliationPaused")
if paused ~= nil and paused.status == "True" then
  hs.status = "Suspended"
  hs.message = describe(paused)
  return hs
end

local ready = find_condition(status.conditions, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
if ready.observedGeneration ~= nil and generation ~= nil and ready.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Ready reflects generation " .. ready.observedGeneration .. ", waiting for " .. generation
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  return hs
end
if ready.status == "False" and not progressing_reasons[ready.reason] then
  hs.status = "Degraded"
  hs.message = describe(ready)
  return hs
end
hs.status = "Progressing"
hs.message = describe(ready)
return hs
