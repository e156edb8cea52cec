"""The tests' own support, not part of the wheel: the control plane runner and its Go build
(controlplane.py, assets.py), the node (node.py) and its images (images.py), the audit
controller and its reports (audit.py), many objects created at once (bulk.py)."""
