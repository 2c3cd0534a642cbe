/* The public headers (chorus.h, chorus_cuda.h, ddp.h) compiled as strict C99, and, when the CUDA toolkit's nccl.h is
 * found, every enumerator value and chorusConfig_t's leading fields checked against NCCL 2.28's, and chorus_cuda.h's
 * stream type against cudaStream_t. */
#include <chorus/chorus.h>
#include <chorus/chorus_cuda.h>
#include <chorus/ddp.h>
#include <stddef.h>
#include <stdio.h>

#ifdef CHORUS_HAVE_NCCL_H
#include <nccl.h>
#endif

static int failures = 0;

#define EXPECT_EQ(a, b)                                                                          \
  do {                                                                                           \
    long long a_ = (long long)(a), b_ = (long long)(b);                                          \
    if (a_ != b_) {                                                                              \
      fprintf(stderr, "%s:%d: %s is %lld but %s is %lld\n", __FILE__, __LINE__, #a, a_, #b, b_); \
      ++failures;                                                                                \
    }                                                                                            \
  } while (0)

int main(void) {
  int version = 0;
  chorusConfig_t config = CHORUS_CONFIG_INITIALIZER;
  EXPECT_EQ(chorusGetVersion(&version), chorusSuccess);
  EXPECT_EQ(version, CHORUS_VERSION_CODE);
  EXPECT_EQ(CHORUS_UNIQUE_ID_BYTES, 128);
  EXPECT_EQ(sizeof(chorusUniqueId), 128);
  EXPECT_EQ(config.size, sizeof(chorusConfig_t));
  EXPECT_EQ(config.blocking, CHORUS_CONFIG_UNDEF_INT);
  EXPECT_EQ(config.timeoutSeconds, CHORUS_CONFIG_UNDEF_INT);
  EXPECT_EQ(config.cudaDevice, CHORUS_CONFIG_UNDEF_INT);
#ifdef CHORUS_HAVE_NCCL_H
  {
    /* chorus_cuda.h names the stream by the runtime's own struct: a cudaStream_t converts with no cast. */
    cudaStream_t cs = NULL;
    struct CUstream_st** out = &cs;
    chorusResult_t (*wrap)(cudaStream_t, chorusStream_t*) = chorusStreamFromCuda;
    (void)out;
    (void)wrap;
  }
  EXPECT_EQ(chorusSuccess, ncclSuccess);
  EXPECT_EQ(chorusUnhandledCudaError, ncclUnhandledCudaError);
  EXPECT_EQ(chorusSystemError, ncclSystemError);
  EXPECT_EQ(chorusInternalError, ncclInternalError);
  EXPECT_EQ(chorusInvalidArgument, ncclInvalidArgument);
  EXPECT_EQ(chorusInvalidUsage, ncclInvalidUsage);
  EXPECT_EQ(chorusRemoteError, ncclRemoteError);
  EXPECT_EQ(chorusInProgress, ncclInProgress);
  EXPECT_EQ(chorusNumResults, ncclNumResults);
  EXPECT_EQ(chorusSum, ncclSum);
  EXPECT_EQ(chorusProd, ncclProd);
  EXPECT_EQ(chorusMax, ncclMax);
  EXPECT_EQ(chorusMin, ncclMin);
  EXPECT_EQ(chorusAvg, ncclAvg);
  EXPECT_EQ(chorusNumOps, ncclNumOps);
  EXPECT_EQ(chorusMaxRedOp, ncclMaxRedOp);
  EXPECT_EQ(sizeof(chorusRedOp_t), sizeof(ncclRedOp_t));
  EXPECT_EQ(chorusInt8, ncclInt8);
  EXPECT_EQ(chorusChar, ncclChar);
  EXPECT_EQ(chorusUint8, ncclUint8);
  EXPECT_EQ(chorusInt32, ncclInt32);
  EXPECT_EQ(chorusInt, ncclInt);
  EXPECT_EQ(chorusUint32, ncclUint32);
  EXPECT_EQ(chorusInt64, ncclInt64);
  EXPECT_EQ(chorusUint64, ncclUint64);
  EXPECT_EQ(chorusFloat16, ncclFloat16);
  EXPECT_EQ(chorusHalf, ncclHalf);
  EXPECT_EQ(chorusFloat32, ncclFloat32);
  EXPECT_EQ(chorusFloat, ncclFloat);
  EXPECT_EQ(chorusFloat64, ncclFloat64);
  EXPECT_EQ(chorusDouble, ncclDouble);
  EXPECT_EQ(chorusBfloat16, ncclBfloat16);
  EXPECT_EQ(chorusFloat8e4m3, ncclFloat8e4m3);
  EXPECT_EQ(chorusFloat8e5m2, ncclFloat8e5m2);
  EXPECT_EQ(chorusNumTypes, ncclNumTypes);
  EXPECT_EQ(chorusScalarDevice, ncclScalarDevice);
  EXPECT_EQ(chorusScalarHostImmediate, ncclScalarHostImmediate);
  EXPECT_EQ(CHORUS_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ(CHORUS_SPLIT_NOCOLOR, NCCL_SPLIT_NOCOLOR);
  EXPECT_EQ(CHORUS_SHRINK_DEFAULT, NCCL_SHRINK_DEFAULT);
  EXPECT_EQ(CHORUS_SHRINK_ABORT, NCCL_SHRINK_ABORT);
  EXPECT_EQ(CHORUS_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES);
  EXPECT_EQ(CHORUS_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_DEFAULT);
  EXPECT_EQ(CHORUS_CTA_POLICY_EFFICIENCY, NCCL_CTA_POLICY_EFFICIENCY);
  EXPECT_EQ(CHORUS_CTA_POLICY_ZERO, NCCL_CTA_POLICY_ZERO);
  EXPECT_EQ(CHORUS_SHRINK_DEFAULT, NCCL_SHRINK_DEFAULT);
  EXPECT_EQ(CHORUS_SHRINK_ABORT, NCCL_SHRINK_ABORT);
  {
    ncclConfig_t nc = NCCL_CONFIG_INITIALIZER;
    EXPECT_EQ(config.magic, nc.magic);
    EXPECT_EQ(config.blocking, nc.blocking);
  }
#define SAME_FIELD(f)                                                \
  EXPECT_EQ(offsetof(chorusConfig_t, f), offsetof(ncclConfig_t, f)); \
  EXPECT_EQ(sizeof(((chorusConfig_t*)0)->f), sizeof(((ncclConfig_t*)0)->f))
  SAME_FIELD(size);
  SAME_FIELD(magic);
  SAME_FIELD(version);
  SAME_FIELD(blocking);
  SAME_FIELD(cgaClusterSize);
  SAME_FIELD(minCTAs);
  SAME_FIELD(maxCTAs);
  SAME_FIELD(netName);
  SAME_FIELD(splitShare);
  SAME_FIELD(trafficClass);
  SAME_FIELD(commName);
  SAME_FIELD(collnetEnable);
  SAME_FIELD(CTAPolicy);
  SAME_FIELD(shrinkShare);
  SAME_FIELD(nvlsCTAs);
  SAME_FIELD(nChannelsPerNetPeer);
  SAME_FIELD(nvlinkCentricSched);
  EXPECT_EQ(offsetof(chorusConfig_t, timeoutSeconds), sizeof(ncclConfig_t));
  printf("checked against nccl.h %d.%d.%d\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  printf("nccl.h not found: enumerator values were not compared with NCCL\n");
#endif
  printf("%d failures\n", failures);
  {
    /* ddp.h: the initializer leaves every option at its default, and bad calls are refused. */
    chorusDdpConfig_t ddp = CHORUS_DDP_CONFIG_INITIALIZER;
    chorusDdpReducer_t reducer = NULL;
    EXPECT_EQ(ddp.size, sizeof(chorusDdpConfig_t));
    EXPECT_EQ(ddp.magic, CHORUS_DDP_CONFIG_MAGIC);
    EXPECT_EQ(ddp.bucketCapBytes == CHORUS_DDP_UNDEF_SIZE, 1);
    EXPECT_EQ(ddp.firstBucketCapBytes == CHORUS_DDP_UNDEF_SIZE, 1);
    EXPECT_EQ(ddp.broadcastChunkBytes == CHORUS_DDP_UNDEF_SIZE, 1);
    EXPECT_EQ(ddp.findUnusedParameters, CHORUS_DDP_UNDEF_INT);
    EXPECT_EQ(ddp.staticGraph, CHORUS_DDP_UNDEF_INT);
    EXPECT_EQ(ddp.unevenInputs, CHORUS_DDP_UNDEF_INT);
    EXPECT_EQ(ddp.hook, CHORUS_DDP_UNDEF_INT);
    EXPECT_EQ(chorusDdpReducerCreate(&reducer, NULL, NULL, 0, &ddp), chorusInvalidArgument);
    EXPECT_EQ(reducer == NULL, 1);
    EXPECT_EQ(chorusDdpMarkReady(NULL, 0), chorusInvalidArgument);
  }
  return failures == 0 ? 0 : 1;
}
