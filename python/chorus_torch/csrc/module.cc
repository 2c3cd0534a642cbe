// The Python module chorus_torch._C: the process group class torch.distributed makes for the
// "chorus" backend (process_group.h), held so that Python drops it without the GIL.
#include <torch/python.h>

#include <chrono>

#include <pybind11/chrono.h>

#include "process_group.h"

namespace {

namespace py = pybind11;

// Holds a process group for Python and drops it without the GIL: its destructor waits for the
// stream, whose host functions may run Python callbacks of futures. Same layout as the holder
// torch gives ProcessGroup (one intrusive_ptr), which is what lets torch read it as its own.
template <typename T>
class NoGilPtr {
 public:
  NoGilPtr() = default;
  explicit NoGilPtr(T* p) : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(p)) {}
  explicit NoGilPtr(c10::intrusive_ptr<T> p) : impl_(std::move(p)) {}
  NoGilPtr(const NoGilPtr&) = default;
  NoGilPtr(NoGilPtr&&) noexcept = default;
  NoGilPtr& operator=(const NoGilPtr&) = default;
  NoGilPtr& operator=(NoGilPtr&&) noexcept = default;
  ~NoGilPtr() {
    if (impl_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      impl_.reset();
    }
  }
  T* get() const noexcept { return impl_.get(); }

 private:
  c10::intrusive_ptr<T> impl_;
};

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilPtr<T>, true);

PYBIND11_MODULE(_C, m) {
  m.doc() = "Chorus as a torch.distributed backend";
  py::module::import("torch.distributed");
  using PG = chorus_torch::ProcessGroupChorus;
  py::class_<PG, c10d::Backend, NoGilPtr<PG>>(m, "ProcessGroupChorus")
      .def(py::init(
               [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
                 return NoGilPtr<PG>(c10::make_intrusive<PG>(store, rank, size, timeout));
               }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return NoGilPtr<PG>(c10::make_intrusive<PG>(store, rank, size, timeout));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
  m.def("version", [] {
    int v = 0;
    (void)chorusGetVersion(&v);
    return v;
  });
}
