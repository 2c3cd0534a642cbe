// The C API of include/chorus/ddp.h over chorus::ddp::Reducer. Handles are never-reused values
// in a table (src/common/handles.h), so a destroyed or made-up handle is refused without being read,
// even once its memory is reused; a call holds its own reference, so a destroy from another
// thread frees the reducer when that call returns.
#include <memory>

#include "include/chorus/ddp.h"
#include "src/common/guard.h"
#include "src/common/handles.h"
#include "src/ddp/reducer.h"

namespace chorus::ddp {
namespace {

HandleTable<Reducer>& reducers() {
  static auto* t = new HandleTable<Reducer>();  // outlives every handle, also at exit
  return *t;
}

// Runs body on the reducer behind a live handle.
template <typename F>
Status withReducer(chorusDdpReducer_t r, F&& body) {
  if (!r) return invalidArgument("reducer is NULL");
  std::shared_ptr<Reducer> impl = reducers().find(handleValue(r));
  if (!impl) return invalidArgument("reducer is not a live chorusDdpReducer_t (destroyed, or never created)");
  return body(*impl);
}

}  // namespace
}  // namespace chorus::ddp

using chorus::guard;
using chorus::invalidArgument;
using chorus::Status;
using chorus::ddp::Reducer;
using chorus::ddp::withReducer;

extern "C" {

chorusResult_t chorusDdpReducerCreate(chorusDdpReducer_t* reducer, chorusComm_t comm, const chorusDdpParam_t* params,
                                      int nparams, const chorusDdpConfig_t* config) {
  return guard("chorusDdpReducerCreate", [&]() -> Status {
    if (!reducer) return invalidArgument("reducer (the output pointer) is NULL");
    *reducer = nullptr;
    if (!comm) return invalidArgument("comm is NULL");
    if (nparams < 0) return invalidArgument("nparams is " + std::to_string(nparams) + "; it must not be negative");
    if (nparams > 0 && !params) return invalidArgument("params is NULL but nparams is " + std::to_string(nparams));
    CHORUS_ASSIGN_OR_RETURN(chorus::ddp::Options options, chorus::ddp::optionsFromConfig(config));
    std::vector<chorus::ddp::ParamInfo> infos(nparams);
    std::vector<std::string> names(nparams);
    for (int i = 0; i < nparams; ++i) {
      if (params[i].type < 0 || params[i].type >= chorusNumTypes) {
        return invalidArgument("params[" + std::to_string(i) + "].type is " + std::to_string(int(params[i].type)) +
                               ", not a chorusDataType_t");
      }
      if (params[i].count > SIZE_MAX / 16) {
        return invalidArgument("params[" + std::to_string(i) + "].count " + std::to_string(params[i].count) +
                               " overflows a byte size");
      }
      infos[i] = {params[i].count, params[i].type};
      if (params[i].name) names[i] = params[i].name;
    }
    CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> impl,
                            Reducer::create(comm, std::move(infos), std::move(names), options));
    *reducer =
        chorus::handleOf<chorusDdpReducer_t>(chorus::ddp::reducers().add(std::shared_ptr<Reducer>(std::move(impl))));
    return Status::ok();
  });
}

chorusResult_t chorusDdpReducerDestroy(chorusDdpReducer_t reducer) {
  return guard("chorusDdpReducerDestroy", [&]() -> Status {
    if (!reducer) return Status::ok();
    std::shared_ptr<Reducer> impl = chorus::ddp::reducers().take(chorus::handleValue(reducer));
    if (!impl) return invalidArgument("reducer is not a live chorusDdpReducer_t (destroyed twice, or never created)");
    impl.reset();  // waits for the reducer's stream, unless a call on another thread still holds it
    return Status::ok();
  });
}

chorusResult_t chorusDdpGradient(chorusDdpReducer_t reducer, int index, void** grad) {
  return guard("chorusDdpGradient", [&]() -> Status {
    if (!grad) return invalidArgument("grad (the output pointer) is NULL");
    *grad = nullptr;
    return withReducer(reducer, [&](Reducer& r) -> Status {
      CHORUS_ASSIGN_OR_RETURN(*grad, r.gradient(index));
      return Status::ok();
    });
  });
}

chorusResult_t chorusDdpZeroGrad(chorusDdpReducer_t reducer) {
  return guard("chorusDdpZeroGrad", [&]() { return withReducer(reducer, [](Reducer& r) { return r.zeroGrad(); }); });
}

chorusResult_t chorusDdpSetSync(chorusDdpReducer_t reducer, int enabled) {
  return guard("chorusDdpSetSync", [&]() -> Status {
    if (enabled != 0 && enabled != 1) return invalidArgument("enabled is " + std::to_string(enabled) + "; use 0 or 1");
    return withReducer(reducer, [&](Reducer& r) { return r.setSync(enabled == 1); });
  });
}

chorusResult_t chorusDdpPrepareForBackward(chorusDdpReducer_t reducer, int* rebuilt) {
  return guard("chorusDdpPrepareForBackward", [&]() -> Status {
    if (rebuilt) *rebuilt = 0;
    return withReducer(reducer, [&](Reducer& r) -> Status {
      bool changed = false;
      CHORUS_TRY(r.prepareForBackward(&changed));
      if (rebuilt) *rebuilt = changed ? 1 : 0;
      return Status::ok();
    });
  });
}

chorusResult_t chorusDdpMarkReady(chorusDdpReducer_t reducer, int index) {
  return guard("chorusDdpMarkReady",
               [&]() { return withReducer(reducer, [&](Reducer& r) { return r.markReady(index, true); }); });
}

chorusResult_t chorusDdpMarkReadyOn(chorusDdpReducer_t reducer, int index, chorusStream_t producer) {
  return guard("chorusDdpMarkReadyOn",
               [&]() { return withReducer(reducer, [&](Reducer& r) { return r.markReady(index, true, producer); }); });
}

chorusResult_t chorusDdpMarkUnused(chorusDdpReducer_t reducer, int index) {
  return guard("chorusDdpMarkUnused",
               [&]() { return withReducer(reducer, [&](Reducer& r) { return r.markReady(index, false); }); });
}

chorusResult_t chorusDdpFinalize(chorusDdpReducer_t reducer) {
  return guard("chorusDdpFinalize", [&]() { return withReducer(reducer, [](Reducer& r) { return r.finalize(); }); });
}

chorusResult_t chorusDdpFinalizeOn(chorusDdpReducer_t reducer, chorusStream_t stream) {
  return guard("chorusDdpFinalizeOn",
               [&]() { return withReducer(reducer, [&](Reducer& r) { return r.finalize(stream); }); });
}

chorusResult_t chorusDdpParamUsed(chorusDdpReducer_t reducer, int index, int* used) {
  return guard("chorusDdpParamUsed", [&]() -> Status {
    if (!used) return invalidArgument("used (the output pointer) is NULL");
    return withReducer(reducer, [&](Reducer& r) -> Status {
      CHORUS_ASSIGN_OR_RETURN(bool u, r.paramUsed(index));
      *used = u ? 1 : 0;
      return Status::ok();
    });
  });
}

chorusResult_t chorusDdpBroadcastParameters(chorusDdpReducer_t reducer, void* const* params, int root) {
  return guard("chorusDdpBroadcastParameters",
               [&]() { return withReducer(reducer, [&](Reducer& r) { return r.broadcastParameters(params, root); }); });
}

chorusResult_t chorusDdpRegisterCommHook(chorusDdpReducer_t reducer, chorusDdpCommHook_t fn, void* state) {
  return guard("chorusDdpRegisterCommHook",
               [&]() { return withReducer(reducer, [&](Reducer& r) { return r.registerHook(fn, state); }); });
}

chorusResult_t chorusDdpJoin(chorusDdpReducer_t reducer, void* const* params) {
  return guard("chorusDdpJoin", [&]() { return withReducer(reducer, [&](Reducer& r) { return r.join(params); }); });
}

chorusResult_t chorusDdpGetStats(chorusDdpReducer_t reducer, chorusDdpStats_t* stats) {
  return guard("chorusDdpGetStats", [&]() -> Status {
    if (!stats) return invalidArgument("stats is NULL");
    return withReducer(reducer, [&](Reducer& r) -> Status {
      *stats = r.stats();
      return Status::ok();
    });
  });
}

chorusResult_t chorusDdpGetBucket(chorusDdpReducer_t reducer, int index, chorusDdpBucket_t* bucket) {
  return guard("chorusDdpGetBucket", [&]() -> Status {
    if (!bucket) return invalidArgument("bucket is NULL");
    return withReducer(reducer, [&](Reducer& r) -> Status {
      CHORUS_ASSIGN_OR_RETURN(*bucket, r.bucket(index));
      return Status::ok();
    });
  });
}

}  // extern "C"
