"""Faces of a diagnosis: the standalone HTML report and the plotly figures the report and the dashboard share."""
