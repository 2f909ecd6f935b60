// FAKE / SIMULATED Neuron device memory for anydevice tests: NOT AWS Neuron code.
//
// Makes the PrivateUse1 device (renamed "neuron" by the fake torch_neuronx) hold real tensors the
// way PyTorch's out-of-tree reference backend (OpenReg) does: storage is plain host memory from
// an allocator registered for PrivateUse1; the ops that must know about that memory (allocation,
// views, set_/resize_, copies, scalar reads) are implemented here; every other op runs on the CPU
// through torch's boxed CPU fallback. One translation unit, torch headers only, no pybind.

#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_local_scalar_dense_cpu_dispatch.h>
#include <ATen/ops/_reshape_alias_cpu_dispatch.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/resize.h>
#include <ATen/ops/resize_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/unfold_cpu_dispatch.h>
#include <ATen/ops/view_as_complex_cpu_dispatch.h>
#include <ATen/ops/view_as_real_cpu_dispatch.h>
#include <ATen/ops/view_cpu_dispatch.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <atomic>
#include <cstdlib>
#include <torch/library.h>

namespace fake_neuron {

// The current device (torch.neuron.set_device) and the device new memory belongs to.
std::atomic<c10::DeviceIndex> current_index{0};
thread_local c10::DeviceIndex allocation_index = -1;  // -1: the current device

struct IndexScope {
  c10::DeviceIndex saved;
  explicit IndexScope(c10::DeviceIndex index) : saved(allocation_index) { allocation_index = index; }
  ~IndexScope() { allocation_index = saved; }
};

// Memory counters of the simulated device (torch_neuronx.memory_stats): live bytes and their peak.
std::atomic<int64_t> allocated_bytes{0};
std::atomic<int64_t> peak_bytes{0};

struct Block {
  void* data;
  size_t nbytes;
};

// Host memory labelled as a neuron device: the CPU allocator's memory under a PrivateUse1 device.
struct HostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex index = allocation_index >= 0 ? allocation_index : current_index.load();
    void* data = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    int64_t now = allocated_bytes += static_cast<int64_t>(nbytes);
    int64_t peak = peak_bytes.load();
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
    }
    return {data, new Block{data, nbytes}, &release, c10::Device(c10::DeviceType::PrivateUse1, index)};
  }
  static void release(void* context) {
    auto* block = static_cast<Block*>(context);
    allocated_bytes -= static_cast<int64_t>(block->nbytes);
    c10::free_cpu(block->data);
    delete block;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const final { default_copy_data(dest, src, count); }
};

HostAllocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

c10::DeviceIndex device_count() {
  const char* cores = std::getenv("FAKE_NEURON_CORES");
  return static_cast<c10::DeviceIndex>(cores ? std::atoi(cores) : 1);
}

// Device guard in C++ (no Python call from autograd's device threads); one default stream per
// device, events are no-ops: the simulated device executes synchronously.
struct Guard final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return {kType, current_index.load()}; }
  void setDevice(c10::Device d) const override {
    if (d.index() >= 0) {
      current_index = d.index();
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { setDevice(d); }
  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return c10::Stream(c10::Stream::DEFAULT, s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

void set_device(int64_t index) { current_index = static_cast<c10::DeviceIndex>(index); }

std::vector<int64_t> memory_stats() { return {allocated_bytes.load(), peak_bytes.load()}; }

const c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "FAKE neuron: only strided tensors");
  IndexScope scope(c10::device_or_default(device).index());
  return at::detail::empty_generic(size, &allocator, kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "FAKE neuron: only strided tensors");
  IndexScope scope(c10::device_or_default(device).index());
  return at::detail::empty_strided_generic(size, stride, &allocator, kKeys, c10::dtype_or_default(dtype));
}

// A CPU tensor over the same host memory (no copy): how data crosses between neuron and cpu.
at::Tensor host_view(const at::Tensor& t) {
  if (t.is_cpu()) {
    return t;
  }
  auto view = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
  view._set_conj(t.is_conj());  // lazy conj / neg bits live on the tensor, not in the memory
  view._set_neg(t.is_neg());
  return view;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.numel() == 0 || dst.numel() == 0) {
    return dst;
  }
  host_view(dst).copy_(host_view(self));
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  IndexScope scope(self.device().index());
  return at::cpu::resize_(self, size, format);  // grows the storage through its own (this) allocator
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  return at::cpu::set_(self, source, offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) { return at::cpu::set_(self, source); }

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) { return at::cpu::set_(self, source); }

at::Tensor& set_empty(at::Tensor& self) {
  IndexScope scope(self.device().index());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &allocator, /*resizable=*/true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

c10::Scalar local_scalar_dense(const at::Tensor& self) { return at::cpu::_local_scalar_dense(host_view(self)); }

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { at::native::cpu_fallback(op, stack); }

}  // namespace fake_neuron

// what the Python side of the fake calls: torch.ops.fake_neuron.*
TORCH_LIBRARY(fake_neuron, m) {
  m.def("set_device(int index) -> ()", &fake_neuron::set_device);
  m.def("memory_stats() -> int[]", &fake_neuron::memory_stats);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(fake_neuron::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(fake_neuron::empty_strided));
  m.impl("_copy_from", TORCH_FN(fake_neuron::copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(fake_neuron::copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(fake_neuron::local_scalar_dense));
  m.impl("resize_", TORCH_FN(fake_neuron::resize_));
  m.impl("set_.source_Storage", TORCH_FN(fake_neuron::set_source_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(fake_neuron::set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(fake_neuron::set_source_tensor));
  m.impl("set_", TORCH_FN(fake_neuron::set_empty));
  // views share the storage, so they are the CPU kernels (pure metadata) applied as is
  m.impl("as_strided", TORCH_FN(at::cpu::as_strided));
  m.impl("view", TORCH_FN(at::cpu::view));
  m.impl("_reshape_alias", TORCH_FN(at::cpu::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::cpu::unfold));
  m.impl("view_as_real", TORCH_FN(at::cpu::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::cpu::view_as_complex));
  // composite ops that would otherwise call the *_overrideable stubs for a non-CPU device
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&fake_neuron::fallback>());
  m.impl("convolution_backward", torch::CppFunction::makeFromBoxedFunction<&fake_neuron::fallback>());
}

// copies see conj / neg views as they are (host_view keeps the bits), instead of materialising
// them first: that materialisation is itself a copy and would recurse
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fake_neuron::fallback>());
}

// torch.autocast("neuron"): the CUDA op lists (lower precision for matmuls/convs, fp32 for the
// numerically sensitive ops); everything else falls through to the kernels above.
#define FAKE_NEURON_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define FAKE_NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(FAKE_NEURON_LOWER)
  AT_FORALL_FP32(FAKE_NEURON_FP32)
}
