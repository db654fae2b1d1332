"""How sure is an order breach, by its query's path proof and by the protocol engine? (issue 26, principle 1)

    python bench/order_proofs.py [--programs N]

For the breaches of the queries whose predicate the engine evaluates at the breach's own event (AMP024's
unscale_ twice / after the step, AMP043's zero_grad, AMP030's read of scaled gradients), on the snippets and
generated programs of `order_identity.py`: the query's proof (a path from the cause that must reach the event)
beside `typestate.proof_of` over the protocol states reaching the event (PROVED when the predicate holds on
every one). Where the two differ, the query cannot hand its proof to the engine without changing findings.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import libcst as cst

sys.path.insert(0, str(Path(__file__).resolve().parent))
import order_identity  # noqa: E402

from amp_lint.analysis import order_gradients, order_reads, order_unscale, typestate  # noqa: E402
from amp_lint.analysis.builder import build_model  # noqa: E402
from amp_lint.analysis.paths import PROVED  # noqa: E402

# (query, the (scaler, optimizer) its predicate is evaluated for)
QUERIES = (
    (order_unscale.unscales_twice, lambda b: (b.scaler, typestate.optimizer_key(b.event))),
    (order_gradients.zero_grads_before_step, lambda b: (b.scaler, b.other.target)),
    (order_reads.scaled_gradient_reads, lambda b: (b.scaler, None)),
)


def main() -> None:
    count = int(sys.argv[sys.argv.index("--programs") + 1]) if "--programs" in sys.argv else 0
    table: collections.Counter = collections.Counter()
    example = {}
    for name, source in list(order_identity.snippets()) + list(order_identity.programs(count)):
        try:
            model = build_model(cst.parse_module(source))
        except (cst.ParserSyntaxError, cst.CSTValidationError):
            continue
        for query, names in QUERIES:
            for breach in query(model):
                if breach.flow is None or breach.kind == order_unscale.UNSCALE_NEXT_ITERATION:
                    continue  # no iteration's states (a lexical answer), or a predicate over the end state
                states = typestate.run(breach.flow).before.get(id(breach.event), ())
                engine = typestate.proof_of(states, *names(breach), breach.kind)
                key = (breach.kind, (breach.proof or PROVED).value, engine.value if engine else "none")
                table[key] += 1
                example.setdefault(key, name)
    print("| breach | path proof | engine proof | count | first snippet |\n|---|---|---|---|---|")
    for key, n in sorted(table.items()):
        print(f"| {key[0]} | {key[1]} | {key[2]} | {n} | {example[key]} |")


if __name__ == "__main__":
    main()
