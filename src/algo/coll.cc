#include "src/algo/coll.h"

namespace chorus {

const char* collName(CollType c) {
  switch (c) {
    case CollType::kAllReduce:
      return "AllReduce";
    case CollType::kBroadcast:
      return "Broadcast";
    case CollType::kReduce:
      return "Reduce";
    case CollType::kAllGather:
      return "AllGather";
    case CollType::kReduceScatter:
      return "ReduceScatter";
    case CollType::kAlltoAll:
      return "AlltoAll";
    case CollType::kGather:
      return "Gather";
    case CollType::kScatter:
      return "Scatter";
    case CollType::kSend:
      return "Send";
    case CollType::kRecv:
      return "Recv";
  }
  return "?";
}

}  // namespace chorus
