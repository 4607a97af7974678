"""Running a notebook in the tests and reading what its cells printed."""


def cell_outputs(nb):
    """Every output of every code cell of ``nb``, in order."""
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def execute_notebook(nb, tmp_path):
    """Runs ``nb`` in ``tmp_path``; asserts no cell failed; returns its outputs and their text."""
    import nbclient

    nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = cell_outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    return outputs, "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
