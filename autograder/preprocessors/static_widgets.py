"""StaticWidgets: an interactive figure in feedback shows its picture, not a widget's repr.

The feedback page has no widget manager, so a cell that called `ipywidgets.interact` would show
its text fallback, "interactive(children=(IntSlider(...". Where the notebook kept the widgets'
state (nbclient stores it in nb.metadata.widgets), the Output widgets inside it hold what the
figure drew for the controls' first values: that picture takes the widget's place, with a line
saying the figure is interactive in the notebook. Any other widget (a progress bar), or one
whose state was not kept (metadata cleared), is one short line in place of the repr.
Autograding keeps it: nbclient stores it, and nbgrader's ClearMetadataPreprocessor is
registered but not enabled.
"""

from nbconvert.preprocessors import Preprocessor
from nbformat import from_dict
from nbformat.v4 import new_output
from traitlets import Bool, Unicode

VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"
MODEL_REF = "IPY_MODEL_"


class StaticWidgets(Preprocessor):
    """Replace widget views with the outputs their Output widgets hold, or with a note."""

    # nbconvert's preprocessors are off unless enabled (nbgrader's are on, as here)
    enabled = Bool(True, help="Use this preprocessor").tag(config=True)

    shown_note = Unicode("This figure is interactive in the notebook; here at {values}.",
                         help="Printed under a widget's picture ({values}: its controls)"
                         ).tag(config=True)
    missing_note = Unicode("[A widget: run this cell in the notebook to see it{values}.]",
                           help="Replaces the text of a widget with no picture ({values}: its "
                           "controls, if the notebook kept them)").tag(config=True)

    def preprocess(self, nb, resources):
        self.models = nb.metadata.get("widgets", {}).get(STATE, {}).get("state", {})
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        outputs = []
        for output in cell.get("outputs", []):
            model_id = output.get("data", {}).get(VIEW, {}).get("model_id")
            if model_id is None:
                outputs.append(output)
                continue
            shown, values = self.contents(model_id, set())
            if shown:
                text = self.shown_note.format(values=", ".join(values) or "its first values")
                outputs.extend(shown + [new_output("stream", name="stdout", text=text + "\n")])
            else:  # no state, or a widget without an Output one (a progress bar)
                values = f" ({', '.join(values)})" if values else ""
                output["data"] = {"text/plain": self.missing_note.format(values=values)}
                outputs.append(output)
        cell.outputs = outputs
        return cell, resources

    def contents(self, model_id, seen):
        """The outputs held by the Output widgets in `model_id` and its children, in order, and
        the controls' `description = value`."""
        model = self.models.get(model_id)
        if model is None or model_id in seen:
            return [], []
        seen.add(model_id)
        state = model.get("state", {})
        outputs = [from_dict(o) for o in state.get("outputs", [])]
        value = state.get("value")
        if state.get("_options_labels") and isinstance(state.get("index"), int):
            value = state["_options_labels"][state["index"]]  # a Dropdown syncs its index
        values = [f"{state['description']} = {value}"] if state.get("description") and \
            value is not None else []
        for child in state.get("children", []):
            if isinstance(child, str) and child.startswith(MODEL_REF):
                more, more_values = self.contents(child[len(MODEL_REF):], seen)
                outputs += more
                values += more_values
        return outputs, values
