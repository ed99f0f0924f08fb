"""The one code generator of hpcsolve: one node set (:mod:`.nodes`) and its printers, CUDA C (:mod:`.c`) and Numba
(:mod:`.numba`: Python for ``numba.cuda.jit``; :mod:`.llvm`: the LLVM IR of Numba intrinsics for the typed scalar
nodes of the storage codecs), and a reader of kernels written in a restricted Python (:mod:`.frontend`). Every printer
has one method per node type (``visit_<ClassName>``, dispatched by :mod:`.printer`). A family's planning (which
populations, which vectors) stays in the family, which emits these nodes, adds its own node types with their methods
in its printer subclasses and keeps its layout there: the LBM kernels (``hpcsolve.lbm.kernels.print_cuda`` /
``print_numba``), the FEM's fused operations (``hpcsolve.fem.linalg.fused_cuda`` / ``fused_numba``), the FP16C codec
(``hpcsolve.core.fp16c`` through ``hpcsolve.core.scalar_ir``)."""
