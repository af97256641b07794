{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJjYWU5YjgxYTY4ZDdiM2Q1N2RmMjIyN2U2NWI1ZTcxN2JlNTM5YjdiNzY1YmZmYjg1NzdjM2E4M2ZiZDIxNGFmIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC1wb3dlcmVkLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "PaGbK7+sIDr7fDvi8T/5O/n33bieyh5tJtg3ToCniscLXz2YyLYVEnohh3XgreVH7kFwZPV0zVDuqMKbHhJ+DQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
