"""Source snippets that several test modules share."""

import textwrap

# A training loop whose only bug is AMP021: the fix inserts one line, `    scaler.update()`, after line 8,
# so every other byte of the file must come back exactly as it was.
MISSING_UPDATE = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
    """
)

# A training loop whose only bug is AMP001, fixed by moving one line: the backward leaves the autocast block.
BACKWARD_IN_AUTOCAST = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
)

# The same loop with the backward outside the autocast block, as AMP001's fix leaves it: no finding.
BACKWARD_OUTSIDE_AUTOCAST = BACKWARD_IN_AUTOCAST.replace(
    "        scaler.scale(loss).backward()\n", "    scaler.scale(loss).backward()\n"
)
