# bash's start-up in a shell on a reservation (tpnode-tui shell): the account's
# own ~/.bashrc as in any interactive bash, then the reservation's run id
# ($TPNODE_SHELL) in front of the prompt it left, as a virtual environment's is.
if [ -f ~/.bashrc ]; then
    . ~/.bashrc
fi
PS1='(${TPNODE_SHELL}) '"${PS1-}"
