// NCCL's net plugin interface, versions 8 to 12, declared here from its documented layout (the
// ncclNet_vN_t structs of NCCL's ext-net documentation and plugin headers), for the adapter that
// lets Chorus load NCCL's net plugins (net_plugin.h). Only what a point-to-point network needs;
// the collective networks (ncclCollNet) are not declared. Results are ncclResult_t values, which
// equal chorusResult_t's; the logger has chorusNetLogger_t's shape.
//
// What changes between versions:
//   v8   init(logger); listen/connect without a context; int sizes in isend, irecv and test.
//   v9   size_t sizes in isend and irecv (test and iflush keep int); properties gain forceFlush,
//        virtual-device properties and the largest message sizes; makeVDevice.
//   v10  init(logger, profiler callback); connect takes a comm config; isend and irecv take
//        profiler handles.
//   v11  init(ctx, commId, config, logger, profiler) and finalize(ctx); listen and connect take the
//        context; setNetAttr; properties gain maxMultiRequestSize.
//   v12  as v11; properties gain railId and planeId.
#pragma once

#include <cstddef>
#include <cstdint>

#include "include/chorus/net.h"

namespace chorus::ncclnet {

using NcclResult = int;  // ncclResult_t
using Logger = chorusNetLogger_t;
using ProfilerCallback = NcclResult (*)(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);
struct DeviceHandle;  // ncclNetDeviceHandle_vN_t: device offload, never asked for here

constexpr int kMaxDevsPerNic = 4;
struct VDeviceProps {
  int ndevs;
  int devs[kMaxDevsPerNic];
};
struct CommConfig {
  int trafficClass;
};

struct Properties_v8 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;  // ncclNetDeviceType (an enum)
  int netDeviceVersion;
};

struct Properties_v9 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  VDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
};
using Properties_v10 = Properties_v9;

struct Properties_v11 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  VDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
};

struct Properties_v12 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  VDeviceProps vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
};

struct Net_v8 {
  const char* name;
  NcclResult (*init)(Logger logFunction);
  NcclResult (*devices)(int* ndev);
  NcclResult (*getProperties)(int dev, Properties_v8* props);
  NcclResult (*listen)(int dev, void* handle, void** listenComm);
  NcclResult (*connect)(int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  NcclResult (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  NcclResult (*deregMr)(void* comm, void* mhandle);
  NcclResult (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  NcclResult (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  NcclResult (*test)(void* request, int* done, int* sizes);
  NcclResult (*closeSend)(void* sendComm);
  NcclResult (*closeRecv)(void* recvComm);
  NcclResult (*closeListen)(void* listenComm);
  NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
};

struct Net_v9 {
  const char* name;
  NcclResult (*init)(Logger logFunction);
  NcclResult (*devices)(int* ndev);
  NcclResult (*getProperties)(int dev, Properties_v9* props);
  NcclResult (*listen)(int dev, void* handle, void** listenComm);
  NcclResult (*connect)(int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  NcclResult (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  NcclResult (*deregMr)(void* comm, void* mhandle);
  NcclResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  NcclResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  NcclResult (*test)(void* request, int* done, int* sizes);
  NcclResult (*closeSend)(void* sendComm);
  NcclResult (*closeRecv)(void* recvComm);
  NcclResult (*closeListen)(void* listenComm);
  NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
  NcclResult (*makeVDevice)(int* d, VDeviceProps* props);
};

struct Net_v10 {
  const char* name;
  NcclResult (*init)(Logger logFunction, ProfilerCallback profFunction);
  NcclResult (*devices)(int* ndev);
  NcclResult (*getProperties)(int dev, Properties_v10* props);
  NcclResult (*listen)(int dev, void* handle, void** listenComm);
  NcclResult (*connect)(int dev, CommConfig* config, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  NcclResult (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  NcclResult (*deregMr)(void* comm, void* mhandle);
  NcclResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  NcclResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                      void** request);
  NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  NcclResult (*test)(void* request, int* done, int* sizes);
  NcclResult (*closeSend)(void* sendComm);
  NcclResult (*closeRecv)(void* recvComm);
  NcclResult (*closeListen)(void* listenComm);
  NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
  NcclResult (*makeVDevice)(int* d, VDeviceProps* props);
};

// ncclNetAttr_vN_t (v11, v12): hints a network may ignore; never set here.
struct NetAttr;

template <typename Props>
struct Net_v11Like {
  const char* name;
  NcclResult (*init)(void** ctx, uint64_t commId, CommConfig* config, Logger logFunction,
                     ProfilerCallback profFunction);
  NcclResult (*devices)(int* ndev);
  NcclResult (*getProperties)(int dev, Props* props);
  NcclResult (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  NcclResult (*connect)(void* ctx, int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  NcclResult (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  NcclResult (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  NcclResult (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  NcclResult (*deregMr)(void* comm, void* mhandle);
  NcclResult (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  NcclResult (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                      void** request);
  NcclResult (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  NcclResult (*test)(void* request, int* done, int* sizes);
  NcclResult (*closeSend)(void* sendComm);
  NcclResult (*closeRecv)(void* recvComm);
  NcclResult (*closeListen)(void* listenComm);
  NcclResult (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  NcclResult (*irecvConsumed)(void* recvComm, int n, void* request);
  NcclResult (*makeVDevice)(int* d, VDeviceProps* props);
  NcclResult (*finalize)(void* ctx);
  NcclResult (*setNetAttr)(void* ctx, NetAttr* netAttr);
};
using Net_v11 = Net_v11Like<Properties_v11>;
using Net_v12 = Net_v11Like<Properties_v12>;

}  // namespace chorus::ncclnet
