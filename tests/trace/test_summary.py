"""Summaries of a call tree: self, total and device time per operator, per
module and per source file, as exact fixed-width text and as JSON."""

from __future__ import annotations

from kernelmap.model import CallNode, CallTree
from kernelmap.trace.summary import summarize


def _linear_twice() -> CallTree:
    k = CallNode("ampere_sgemm_128x64_tn", "gpu_kernel", attrs={"duration_us": 30.0, "library": "cuBLAS", "closed": True})
    launch = CallNode("cudaLaunchKernel", "runtime", attrs={"duration_us": 5.0}, children=(k,))
    addmm = CallNode(
        "aten::addmm", "op",
        attrs={"duration_us": 40.0, "input_shapes": [[10], [8, 16], [16, 10], [], []], "dispatch_key": "CUDA",
               "kernel": "at::native::addmm_out_cuda", "library": "cuBLAS", "closed": True, "source": "aten/src/ATen/native/cuda/Blas.cpp:400"},
        children=(launch,),
    )
    linear = CallNode(
        "aten::linear", "op",
        attrs={"duration_us": 60.0, "input_shapes": [[8, 16], [10, 16], [10]], "dispatch_key": "CompositeImplicitAutograd",
               "kernel": "at::native::linear", "source": "aten/src/ATen/native/Linear.cpp:73"},
        children=(addmm,),
    )
    module = CallNode("Linear_0", "module", attrs={"duration_us": 70.0}, children=(linear,))
    return CallTree(CallNode("trace", "trace", children=(CallNode("thread 1", "thread", children=(module, module)),)))


def test_summary_text_exact():
    """Every table names file:line: the operator's source, each operator's line in
    its source file, the kernel's source."""
    assert summarize(_linear_twice()).to_text(width=150) == (
        "Operators (2; top 2 by total time)\n"
        "operator      calls  self ms  total ms  dev ms  dispatch key               kernel                      source                                  library          most comm…\n"
        "------------  -----  -------  --------  ------  -------------------------  --------------------------  --------------------------------------  ---------------  ----------\n"
        "aten::linear      2    0.040     0.120   0.060  CompositeImplicitAutograd  at::native::linear          aten/src/ATen/native/Linear.cpp:73      cuBLAS (closed)  [8, 16], …\n"
        "aten::addmm       2    0.080     0.080   0.060  CUDA                       at::native::addmm_out_cuda  aten/src/ATen/native/cuda/Blas.cpp:400  cuBLAS (closed)  [10], [8,…\n"
        "\n"
        "Modules (1; time includes nested modules)\n"
        "module  calls  total ms  dev ms  operators called directly\n"
        "------  -----  --------  ------  -------------------------\n"
        "Linear      2     0.140   0.060  aten::linear\n"
        "\n"
        "Source files (2; kernel sources, else the registration that serves the op)\n"
        "file                                calls  self ms  dev ms  operators / kernels\n"
        "----------------------------------  -----  -------  ------  -------------------\n"
        "aten/src/ATen/native/cuda/Blas.cpp      2    0.080       -  aten::addmm:400\n"
        "aten/src/ATen/native/Linear.cpp         2    0.040       -  aten::linear:73\n"
        "\n"
        "Kernels of each operator (functor or kernel source, else library)\n"
        "operator     source  kernel\n"
        "-----------  ------  ----------------------\n"
        "aten::addmm  cuBLAS  ampere_sgemm_128x64_tn\n"
        "\n"
        "GPU time 0.060 ms: 0.0% with a source location, 100.0% in a named library, 0.0% unresolved\n"
    )


def test_a_long_location_keeps_its_file_and_line():
    from kernelmap.trace.summary import _table

    text = _table("t", ("source", "x"), [("aten/src/ATen/native/cuda/very/deep/Blas.cpp:400", "y")], 60, limits={0: 20},
                  left_cut={0})
    assert "…y/deep/Blas.cpp:400  y" in text


def test_summary_json_rows():
    doc = summarize(_linear_twice()).to_json()
    addmm = next(r for r in doc["ops"] if r["name"] == "aten::addmm")
    assert addmm["kernels"] == [{"name": "ampere_sgemm_128x64_tn", "launches": 2, "source": "cuBLAS"}]
    assert addmm["shapes"] == [{"shapes": "[10], [8, 16], [16, 10]", "calls": 2}]
    assert (addmm["closed"], addmm["library"], addmm["self_us"], addmm["device_us"]) == (True, "cuBLAS", 80.0, 60.0)
    assert [m["name"] for m in doc["modules"]] == ["Linear"]
