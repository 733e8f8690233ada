"""The controller bolt of this project's elastic topologies."""

from __future__ import annotations

from elastorm.storm.controller_bolt import MigrationControllerBolt


class ProjectController(MigrationControllerBolt):
    """elastorm's migration controller as it is (``elastorm.controller`` decides; the
    bolt carries its decisions out): the place a project adds its own policy, e.g. a
    subclass that turns thresholds from its own config."""
