#!/bin/sh
echo "coverage tools are not available in tpdp's offline build" >&2
exit 1
