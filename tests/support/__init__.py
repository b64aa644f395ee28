"""What several tests share and is not a fixture: builders of timelines, requests and
configurations, fake transports, scripted and hostile servers, real parts on loopback.

Test modules import from here; ``conftest.py`` files keep pytest fixtures only (and build
them from what is here). A test module never imports another test module.
"""
