"""How the ONNX import's time grows with the model: chains of N elementwise nodes, named or not.

    .venv/bin/python benchmarks/import_scale.py [--nodes 1000,10000,100000]

Each model is a chain of Relu nodes over a 4-element input, built with onnx.helper; "unnamed" leaves
every node's name empty, so the importer names each task after its op (relu, relu_1, relu_2, ...),
the case that was quadratic.  One import per row, in this process (a benchmark, not a test: the
suite checks the typed errors, not the time).
"""

from __future__ import annotations

import argparse
import time

from onnx import TensorProto, helper


def chain(nodes: int, named: bool):
    made, previous = [], "x"
    for k in range(nodes):
        made.append(helper.make_node("Relu", [previous], [f"v{k}"], name=f"relu{k}" if named else ""))
        previous = f"v{k}"
    graph = helper.make_graph(made, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1000,10000,100000")
    args = parser.parse_args()
    import ptowsp as pw

    print("nodes | names | import s | us per node")
    for count in (int(n) for n in args.nodes.split(",")):
        for named in (True, False):
            model = chain(count, named)
            start = time.perf_counter()
            wl = pw.frontend.from_onnx(model)
            seconds = time.perf_counter() - start
            assert len(wl.tasks) == count
            print(f"{count} | {'named' if named else 'unnamed'} | {seconds:.2f} | {seconds / count * 1e6:.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
